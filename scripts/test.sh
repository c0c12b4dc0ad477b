#!/usr/bin/env bash
# Runs every test of ratecell, from a fresh clone on a fresh machine:
#   0. the system packages the Redis module needs (redis-server,
#      redis-tools, libclang-dev), installed where missing;
#   1. formatting and clippy of the whole workspace, every feature on
#      (warnings are errors);
#   2. the Rust suites of the whole workspace (unit, doc, property,
#      brute-force, stress, keyed, C ABI header and fuzz, CLI goldens, the
#      HTTP layer, the Redis client against servers it starts), in debug so
#      arithmetic overflow panics instead of wrapping; and that a Rust
#      crate depending on ratecell builds no C library
#      (scripts/dependent-tests.sh);
#   3. the loom models of every concurrent protocol;
#   4. the C and C++ bindings, normally and under ASan/UBSan;
#   5. the Go and Python bindings (when present);
#   6. installing for C and C++ (scripts/install.sh into a temporary prefix,
#      then a C program via pkg-config and a C++ one via CMake).
#   7. the Redis module's server tests (from step 2's build) and its
#      Python and Go clients, on real servers;
#   8. ratecell-server against envoyproxy/ratelimit, nginx and itself
#      (scripts/server-tests.sh: the interop module's Go tests);
#   9. that no step left a file in the temporary directory.
# Steps 3-6 run beside steps 1-2, as a second lane (see bindings_lane below).
# Each step installs or finds what it needs. Prints one line per step and a
# last line "N passed, M failed" counting steps; exits non-zero if any failed.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

STEP_PREFIX="==="
. "$root/scripts/lib/steps.sh"

need() {
    command -v "$1" >/dev/null 2>&1 || {
        echo "missing $1: $2" >&2
        return 1
    }
}

need cargo "install Rust (https://rustup.rs) first" || exit 1

# Disk: the steps together leave about 3 GB under target/; on CI, which
# removes each step's build products once no later step needs them, at
# most about 3 GB at once (the workspace's debug build, kept for the Redis
# step, beside the second lane's). Say what there is, so a step that fails
# for want of it is recognised as such.
target="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$target"
echo "$STEP_PREFIX disk: $(df -Pm "$target" | awk 'NR == 2 { print $4 }') MB free for $target"

# On CI (CI set, as CI services set it) nothing is built twice, so
# incremental compilation's caches only take disk, and once a step has run,
# the build products no later step uses are removed.
if [ -n "${CI:-}" ]; then
    export CARGO_INCREMENTAL=0
fi
prune() {
    [ -n "${CI:-}" ] && rm -rf "$@"
    return 0
}
# Every step's temporary files go to one fresh directory, which must be
# empty at the end: a test that leaves a file behind fails the run. Two
# tools' own leftovers are excepted: pytest's numbered base directories,
# which it keeps by design, and the files the go command writes to probe the
# C compiler's flags for cgo (cgo-gcc-input-*), which it does not remove.
suite_tmp="$(mktemp -d)"
export TMPDIR="$suite_tmp"
nothing_left_behind() {
    local left
    left="$(find "$suite_tmp" -mindepth 1 -maxdepth 1 ! -name 'pytest-of-*' \
        ! -name 'cgo-gcc-input-*' | head -20)"
    [ -z "$left" ] || { echo "left in $suite_tmp: $left" >&2; return 1; }
    rm -rf "$suite_tmp"
}
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true

. "$root/scripts/lib/workspace.sh"
step packages system_packages

# Two lanes at once: much of each step is one core's work (a test binary
# of one test, an LTO link, pytest, a server's round trips), so on a
# machine of two cores or more, loom and the bindings' steps run beside
# the workspace's lint and test build. They share target/ only for the
# bindings' release and dist builds, which cargo's lock takes in turn. The
# second lane's output is printed when it ends, and its steps counted with
# the others. The Redis step, which needs both lanes' builds, runs after.
bindings_lane() {
    step loom scripts/loom.sh
    prune "${LOOM_TARGET_DIR:-$root/target/loom}"
    step c-cpp scripts/c-tests.sh
    [ -x scripts/go-tests.sh ] && step go scripts/go-tests.sh
    [ -x scripts/python-tests.sh ] && step python scripts/python-tests.sh
    step install scripts/install-tests.sh
    echo "$passed $failed ${failures[*]}" >"$lane_counts"
}
lane_log="$target/bindings-lane.log"
lane_counts="$target/bindings-lane.counts"
rm -f "$lane_counts"
lane_started=$SECONDS
(passed=0 failed=0 failures=() && bindings_lane) >"$lane_log" 2>&1 &
lane_pid=$!
echo "$STEP_PREFIX loom, c-cpp, go, python and install: running beside the steps below (their output follows them)"
step fmt cargo fmt --all -- --check
# Every feature: the Redis module's `floor` commands and each of the HTTP
# layer's stores are linted with the rest.
step clippy cargo clippy --workspace --all-targets --all-features --quiet -- -D warnings
# And the library as the C library builds it: without `pair-checks`.
step clippy-capi cargo clippy -p ratecell-capi --all-targets --quiet -- -D warnings
# The crates a user would install are packageable (metadata, the files
# they ship); packaged together, so the command's and the C library's
# ratecell is this one. Not verified here (each package built again, a few
# minutes): the Python sdist (scripts/python-tests.sh) builds ratecell and
# ratecell-capi from their packages, offline.
step package cargo package -p ratecell -p ratecell-capi -p ratecell-cli --no-verify --allow-dirty --quiet
# The Redis client's tests start their own servers with this build's
# module; the module's server tests, marked ignored, run in the redis step
# from this build.
step rust env RATECELL_REDIS_MODULE="$workspace_module" "${workspace_test[@]}" --quiet
step dependent scripts/dependent-tests.sh
# The second lane: its output, then its steps counted with these.
wait "$lane_pid"
cat "$lane_log"
echo "$STEP_PREFIX (loom to install ran beside the steps above: $((SECONDS - lane_started)) s from the start)"
if read -r lane_passed lane_failed lane_failures <"$lane_counts"; then
    passed=$((passed + lane_passed))
    failed=$((failed + lane_failed))
    [ -n "$lane_failures" ] && failures+=($lane_failures)
else
    failed=$((failed + 1))
    failures+=("bindings-lane")
fi
rm -f "$lane_log" "$lane_counts"
[ -x scripts/redis-tests.sh ] && step redis scripts/redis-tests.sh
# ratecell-server against envoyproxy/ratelimit (its own client, a
# differential run), nginx auth_request and leased replicas: from step 2's
# debug build.
[ -x scripts/server-tests.sh ] && step server scripts/server-tests.sh
prune "$target/debug"
step tmp nothing_left_behind

steps_summary
