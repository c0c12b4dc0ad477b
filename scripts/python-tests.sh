#!/usr/bin/env bash
# Tests the Python binding (bindings/python) and the C side of the
# cross-language parity contract (tests/parity), from a fresh clone:
#
#   1. cargo build --release --lib;
#   2. a venv under the cargo target dir, into which `pip install
#      ./bindings/python` (the package builds and bundles the library itself)
#      plus pytest, numpy and limits from PyPI; pytest on bindings/python/tests
#      against that installed package (no tests collected is a failure);
#   3. a second venv with `pip install -e ./bindings/python`, the same tests;
#   4. bindings/c/tests/parity.c, built with -std=c11 -Wall -Wextra -Wpedantic
#      -Werror against libratecell.a (plain, and under ASan/UBSan), replaying
#      tests/parity/trace.csv through the C ABI; its output must equal
#      tests/parity/expected.csv byte for byte (single and batch calls);
#   5. bindings/python/bench.py --smoke (the benchmark runs, tiny sizes).
#
# Needs cargo, gcc and python3 (>= 3.10, with venv); installs nothing outside
# the target dir. Honours CARGO_TARGET_DIR, CC and PYTHON. Prints one line
# per step and, last, "N passed, M failed" over the steps; exits non-zero if
# any failed.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
export CARGO_TARGET_DIR="$target"
out="$target/python-tests"
python="${PYTHON:-python3}"
cc="${CC:-gcc}"
# The tests must see the library the package bundles, nothing else.
unset RATECELL_LIBRARY PYTHONPATH

. "$root/scripts/lib/steps.sh"

# venv DIR: makes (or reuses) a virtual environment.
venv() {
    [ -x "$1/bin/python" ] || "$python" -m venv "$1"
}

# run_pytest VENV: the binding's tests against what VENV has installed. Run
# from an empty directory so that nothing but the installed package can be
# imported as `ratecell`.
run_pytest() {
    local dir="$out/pytest-cwd"
    mkdir -p "$dir"
    (cd "$dir" && RATECELL_EXPECT_BUNDLED=1 "$1/bin/python" -m pytest -p no:cacheprovider \
        -c "$root/bindings/python/pyproject.toml" --rootdir "$root/bindings/python" \
        "$root/bindings/python/tests")
    local status=$?
    if [ "$status" -eq 5 ]; then
        echo "pytest collected no tests" >&2
        return 1
    fi
    return "$status"
}

installed() {
    local env="$target/python-venv"
    venv "$env" || return 1
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check pytest numpy limits ||
        return 1
    # --force-reinstall: the version number does not change between builds.
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
        --no-deps ./bindings/python || return 1
    run_pytest "$env"
}

editable() {
    local env="$target/python-venv-editable"
    venv "$env" || return 1
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check pytest numpy ||
        return 1
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check -e ./bindings/python ||
        return 1
    run_pytest "$env"
}

c_parity() {
    local lib="$target/release/libratecell.a"
    local warn=(-std=c11 -Wall -Wextra -Wpedantic -Werror -g -O1 -I include)
    local san=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
    # What the Rust standard library needs when linked statically.
    local sys=(-lgcc_s -lutil -lrt -lpthread -lm -ldl)
    "$cc" "${warn[@]}" bindings/c/tests/parity.c "$lib" "${sys[@]}" -o "$out/parity" || return 1
    "$cc" "${warn[@]}" "${san[@]}" bindings/c/tests/parity.c "$lib" "${sys[@]}" \
        -o "$out/parity-sanitized" || return 1
    local ok=0 run
    for run in "parity" "parity --batch" "parity-sanitized" "parity-sanitized --batch"; do
        # shellcheck disable=SC2086 # "$run" is a program and its flag
        if ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1 \
            "$out/"$run tests/parity/trace.csv >"$out/parity.out" &&
            cmp -s "$out/parity.out" tests/parity/expected.csv; then
            echo "$run: $(wc -l <"$out/parity.out") decisions equal tests/parity/expected.csv"
        else
            echo "$run: differs from tests/parity/expected.csv:" >&2
            diff "$out/parity.out" tests/parity/expected.csv | head -20 >&2
            ok=1
        fi
    done
    return "$ok"
}

bench_smoke() {
    "$target/python-venv/bin/python" bindings/python/bench.py --smoke
}

echo "== cargo build --release --lib"
if ! cargo build --release --lib; then
    echo "0 passed, 1 failed"
    exit 1
fi
mkdir -p "$out"
# The C worker of bindings/python/tests/test_shared.py (C and Python
# processes sharing one region).
if "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -I include -pthread \
    bindings/c/tests/shared_worker.c "$target/release/libratecell.a" \
    -lgcc_s -lutil -lrt -lpthread -lm -ldl -o "$out/shared_worker"; then
    export RATECELL_SHARED_C_WORKER="$out/shared_worker"
fi

step "pytest (pip install ./bindings/python)" installed
step "pytest (pip install -e ./bindings/python)" editable
step "C parity (bindings/c/tests/parity.c)" c_parity
step "bench.py --smoke" bench_smoke

steps_summary
