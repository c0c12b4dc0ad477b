#!/usr/bin/env bash
# Instructions per call of the hot paths, counted by callgrind (a count,
# unlike a time, does not move with the load on a shared machine): the
# Rust cases of examples/hotpath.rs and the C ABI's calls of
# crates/ratecell-capi/bench/hot_calls.c, for this checkout and, given
# REV, for that revision in the same run, with the change between them.
#
#   scripts/hot-instructions.sh [REV]    # REV: a commit, tag or branch
#
# REV is built in a temporary worktree with its own target directory (a
# few minutes on 2 cores). The C harness is this checkout's, compiled
# against each revision's header; for a revision from before the hot calls
# returned a `ratecell_status` it is compiled with RATECELL_INT32_CALLS.
# Needs valgrind.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

rev="${1:-}"
n=200000
rust_cases=(direct-gcra-tsc direct-gcra-tsc-allow direct-gcra-at keyed-1k-u64 keyed-1k-u64-at shared-1k-u64-at)
c_cases=(check allow allow-keyed leases denials)
for tool in valgrind gcc git cargo; do
    command -v "$tool" >/dev/null || {
        echo "hot-instructions.sh: needs $tool (valgrind: apt-get install valgrind)" >&2
        exit 2
    }
done

work="$(mktemp -d)"
cleanup() {
    if [ -n "$rev" ] && [ -d "$work/rev" ]; then
        git worktree remove --force "$work/rev" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
# The keyed cases' snapshots: made by the first run of each case, read by
# the other, so both builds probe the same slots.
export HOT_CALLS_DIR="$work"

# build NAME CHECKOUT TARGET: the hotpath example, the C library, and the
# harness against that checkout's header, as $work/NAME-hotpath and
# $work/NAME-calls.
build() {
    local name="$1" checkout="$2" target="$3" flags=()
    echo "hot-instructions.sh: building $name" >&2
    (cd "$checkout" && CARGO_TARGET_DIR="$target" cargo build --quiet --release --example hotpath &&
        CARGO_TARGET_DIR="$target" cargo build --quiet --release -p ratecell-capi)
    if grep -q 'int32_t ratecell_allow(' "$checkout/include/ratecell.h"; then
        flags=(-DRATECELL_INT32_CALLS)
    elif grep -q 'bool \*allowed_out);' "$checkout/include/ratecell.h"; then
        echo "hot-instructions.sh: $name's ratecell_allow takes a bool * (a shape some commits of December 2026 had); the harness measures the shapes before and after it" >&2
        exit 2
    fi
    gcc -O2 -g -Wall -Wextra "${flags[@]}" -I "$checkout/include" \
        crates/ratecell-capi/bench/hot_calls.c "$target/release/libratecell.a" \
        -lpthread -ldl -lm -o "$work/$name-calls"
    cp "$target/release/examples/hotpath" "$work/$name-hotpath"
}

# count BINARY TOGGLE CASE: instructions per call (empty if the case does
# not exist in that build). The hotpath example's keyed and shared cases
# hash with a new random seed each run, and where 1024 keys land moves
# their count by a few percent: those are the mean of $seeds runs.
seeds=5
count() {
    local out="$work/callgrind.out" runs=1 total=0 i
    case "$1:$3" in *hotpath:keyed-* | *hotpath:shared-*) runs=$seeds ;; esac
    for ((i = 0; i < runs; i++)); do
        rm -f "$out"
        valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect="$2" \
            "$1" "$3" "$n" >/dev/null 2>&1 || return 0
        total=$((total + $(awk '/^(summary|totals):/ { print $2; exit }' "$out")))
    done
    awk -v t="$total" -v d="$((n * runs))" 'BEGIN { printf "%.1f", t / d }'
}

row() { # NAME TOGGLE CASE
    local now before=""
    # The revision first: its keyed snapshots are then read by this build,
    # which reads every older format version.
    if [ -n "$rev" ]; then before="$(count "$work/rev-$1" "$2" "$3")"; fi
    now="$(count "$work/now-$1" "$2" "$3")"
    if [ -n "$rev" ]; then
        python3 -c "
b, n = '$before', '$now'
change = f'{100 * (float(n) - float(b)) / float(b):+.2f}%' if b and n else '—'
print(f'| $1 $3 | {b or \"—\"} | {n or \"—\"} | {change} |')"
    else
        echo "| $1 $3 | $now |"
    fi
}

build now "$root" "${CARGO_TARGET_DIR:-$root/target}"
if [ -n "$rev" ]; then
    git worktree add --detach --quiet "$work/rev" "$rev"
    build rev "$work/rev" "$work/rev-target"
    echo "| case | $rev | $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + changes') | change |"
    echo "|---|---:|---:|---:|"
else
    echo "| case | $(git rev-parse --short HEAD) |"
    echo "|---|---:|"
fi
for c in "${rust_cases[@]}"; do row hotpath 'hotpath::measured*' "$c"; done
for c in "${c_cases[@]}"; do row calls 'measured*' "$c"; done
echo
echo "hotpath keyed-* and shared-*: the mean of $seeds runs, each under its own random hash seed."
echo "calls *: keyed cases read one snapshot (one seed, the same slots) in both builds."

