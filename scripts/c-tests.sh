#!/usr/bin/env bash
# Builds libratecell (cargo build --release -p ratecell-capi) and runs, against it, the
# C example, the C11 tests, the C++17 wrapper tests and the C fuzz driver of
# the ABI, twice:
#
#   1. "normal":    linked to libratecell.so (rpath to the cargo target dir);
#   2. "sanitized": linked to libratecell.a, built with
#                   -fsanitize=address,undefined (leak detection on).
#
# Every program is compiled with -Wall -Wextra -Wpedantic -Werror. Needs only
# cargo, gcc and g++ (gcc's libasan/libubsan). Honours CARGO_TARGET_DIR, CC,
# CXX, and RATECELL_FUZZ_ITERATIONS (calls per fuzz run; default 200000).
#
# Prints one line per test and, last, "N passed, M failed" over all runs;
# exits non-zero on any failure.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
lib="$target/release"
out="$target/c-tests"
cc="${CC:-gcc}"
cxx="${CXX:-g++}"
fuzz_iterations="${RATECELL_FUZZ_ITERATIONS:-200000}"

echo "== cargo build --release -p ratecell-capi"
cargo build --release -p ratecell-capi
for artifact in libratecell.so libratecell.a; do
    if [ ! -f "$lib/$artifact" ]; then
        echo "missing $lib/$artifact" >&2
        exit 1
    fi
done
mkdir -p "$out"

warn=(-Wall -Wextra -Wpedantic -Werror)
cflags=(-std=c11 "${warn[@]}" -g -O1 -I include -I bindings/c/tests)
cxxflags=(-std=c++17 "${warn[@]}" -g -O1 -I include -I bindings/cpp -I bindings/c/tests)
san=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
# What the Rust standard library needs from the system when linked statically
# (rustc --print native-static-libs).
static_libs=(-lgcc_s -lutil -lrt -lpthread -lm -ldl)
dynamic=(-L "$lib" -Wl,-rpath,"$lib" -lratecell -lpthread)
static=("$lib/libratecell.a" "${static_libs[@]}")

# allocator_may_return_null: a huge capacity must reach the library as a NULL
# from calloc (RATECELL_OUT_OF_MEMORY), as with the real allocator, instead
# of ASan aborting the process on the request.
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:halt_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# Sanity check: the sanitizer runtime links and catches a leak on this machine.
# If this fails, the sanitized run below would prove nothing.
printf '#include <stdlib.h>\nint main(void){volatile char *p=malloc(7);p[0]=1;p=0;return 0;}\n' >"$out/leak.c"
"$cc" "${san[@]}" "$out/leak.c" -o "$out/leak"
if "$out/leak" 2>/dev/null; then
    echo "the sanitizer runtime did not report a deliberate leak: sanitized runs are not trustworthy" >&2
    exit 1
fi

total_passed=0
total_failed=0

# run NAME COMMAND...: runs a test program; counts its "N passed, M failed".
run() {
    local name="$1"
    shift
    echo "== $name"
    local log="$out/$name.log"
    set +e
    # The fuzz driver's impossible capacities make ASan warn on every
    # refused allocation (as intended, see ASAN_OPTIONS); keep the log readable.
    "$@" 2>&1 | grep --line-buffered -v 'AddressSanitizer failed to allocate' | tee "$log"
    local status="${PIPESTATUS[0]}"
    set -e
    local summary passed failed
    summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1 || true)"
    passed="$(echo "$summary" | awk '{print $1+0}')"
    failed="$(echo "$summary" | awk '{print $3+0}')"
    if [ -z "$summary" ]; then
        # A program without its own count (the example) is one test.
        if [ "$status" -eq 0 ]; then passed=1; failed=0; else passed=0; failed=1; fi
    elif [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
        failed=1 # a crash or a sanitizer report after the summary line
    fi
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    if [ "$status" -ne 0 ]; then
        echo "$name exited with status $status" >&2
    fi
}

for mode in normal sanitized; do
    if [ "$mode" = normal ]; then
        extra=() link=("${dynamic[@]}")
    else
        extra=("${san[@]}") link=("${static[@]}")
    fi
    echo "== building ($mode)"
    "$cc" "${cflags[@]}" "${extra[@]}" bindings/c/example.c "${link[@]}" -o "$out/example-$mode"
    "$cc" "${cflags[@]}" "${extra[@]}" bindings/c/tests/test_ratecell.c "${link[@]}" -o "$out/test_c-$mode"
    "$cc" "${cflags[@]}" "${extra[@]}" bindings/c/tests/fuzz_abi.c "${link[@]}" -o "$out/fuzz_c-$mode"
    "$cc" "${cflags[@]}" "${extra[@]}" bindings/c/tests/test_fork.c "${link[@]}" -o "$out/test_fork-$mode"
    "$cc" "${cflags[@]}" "${extra[@]}" bindings/c/tests/test_multi.c "${link[@]}" -o "$out/test_multi_c-$mode"
    "$cc" "${cflags[@]}" "${extra[@]}" bindings/c/tests/test_tiers.c "${link[@]}" -o "$out/test_tiers_c-$mode"
    "$cc" "${cflags[@]}" "${extra[@]}" bindings/c/tests/test_leases.c "${link[@]}" -o "$out/test_leases_c-$mode"
    "$cxx" "${cxxflags[@]}" "${extra[@]}" bindings/cpp/tests/test_ratecell.cpp "${link[@]}" -o "$out/test_cpp-$mode"
    "$cc" "${cflags[@]}" "${extra[@]}" bindings/c/tests/test_snapshot.c "${link[@]}" -o "$out/test_snapshot_c-$mode"
    run "example-$mode" "$out/example-$mode"
    run "test_c-$mode" "$out/test_c-$mode"
    run "test_multi_c-$mode" "$out/test_multi_c-$mode"
    run "test_tiers_c-$mode" "$out/test_tiers_c-$mode"
    run "test_leases_c-$mode" "$out/test_leases_c-$mode"
    run "test_cpp-$mode" "$out/test_cpp-$mode"
    run "test_snapshot_c-$mode" "$out/test_snapshot_c-$mode" "$out"
    run "fuzz_c-$mode" "$out/fuzz_c-$mode" "$fuzz_iterations"
    run "test_fork-$mode" "$out/test_fork-$mode"
done

echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
