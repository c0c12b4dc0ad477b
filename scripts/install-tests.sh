#!/usr/bin/env bash
# Tests scripts/install.sh the way a C or C++ user consumes the library:
#
#   1. installs into a temporary prefix and checks the layout (the versioned
#      shared library and its SONAME, the symlinks, the static library, both
#      headers, ratecell.pc, the CMake package);
#   2. builds tests/install/consumer.c with `pkg-config --cflags --libs
#      ratecell` (-Wall -Wextra -Wpedantic -Werror) and runs it: it must load
#      libratecell by its SONAME from the prefix;
#   3. builds tests/install/consumer.cpp with CMake's find_package(ratecell),
#      linked to ratecell::ratecell and to ratecell::ratecell_static, and
#      runs both;
#   4. moves the installed tree elsewhere and builds the CMake project again
#      (the CMake package is relocatable);
#   5. stages an install with --destdir and checks that the files land under
#      it while naming the final prefix;
#   6. sizes: the installed libratecell.so at most 2 MiB, and
#      tests/install/hello.c linked statically against libratecell.a
#      (-Wl,--gc-sections) at most 3 MiB; prints both figures in bytes.
#      RATECELL_MAX_SO_BYTES and RATECELL_MAX_STATIC_BYTES change the limits.
#
# Needs cargo, cc, c++, pkg-config and cmake (>= 3.16); installs pkg-config
# and cmake with apt-get when they are missing and this runs as root.
# Honours CARGO_TARGET_DIR, CC and CXX. Prints one line per check and, last,
# "N passed, M failed"; exits non-zero if any failed.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export CC="${CC:-cc}" CXX="${CXX:-c++}"

. "$root/scripts/lib/checks.sh"
finish() {
    checks_summary
    exit
}

for tool in pkg-config cmake; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "== apt-get install $tool"
            apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
        fi
        command -v "$tool" >/dev/null 2>&1 || { echo "missing $tool: install it (apt-get install $tool)" >&2; failed=1; finish; }
    fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/ratecell-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
major="${version%%.*}" rest="${version#*.}" minor="${rest%%.*}"
if [ "$major" = 0 ]; then sover="0.$minor"; else sover="$major"; fi

echo "== scripts/install.sh --prefix $prefix"
if ! scripts/install.sh --prefix "$prefix"; then
    echo "scripts/install.sh failed" >&2
    failed=1
    finish
fi

lib="$prefix/lib"
soname_of() { readelf -d "$1" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p'; }
needed_of() { readelf -d "$1" | sed -n 's/.*Shared library: \[\(libratecell[^]]*\)\]/\1/p'; }
check "lib/libratecell.so.$version is the shared library" test -f "$lib/libratecell.so.$version" -a ! -L "$lib/libratecell.so.$version"
check "its SONAME is libratecell.so.$sover" test "$(soname_of "$lib/libratecell.so.$version")" = "libratecell.so.$sover"
check "lib/libratecell.so.$sover -> libratecell.so.$version" test "$(readlink "$lib/libratecell.so.$sover")" = "libratecell.so.$version"
check "lib/libratecell.so -> libratecell.so.$sover" test "$(readlink "$lib/libratecell.so")" = "libratecell.so.$sover"
check "lib/libratecell.a exports ratecell_check" sh -c "nm -g --defined-only '$lib/libratecell.a' 2>/dev/null | grep -q ' T ratecell_check$'"
check "the shared library is stripped (no .symtab)" sh -c "! readelf -S '$lib/libratecell.so.$version' | grep -q ' .symtab '"
check "the static library has no debug information" sh -c "! readelf -S '$lib/libratecell.a' | grep -q ' .debug_info '"
check "include/ratecell.h is the committed header" cmp -s "$prefix/include/ratecell.h" include/ratecell.h
check "include/ratecell.hpp is the C++ wrapper" cmp -s "$prefix/include/ratecell.hpp" bindings/cpp/ratecell.hpp

export PKG_CONFIG_PATH="$lib/pkgconfig"
check "pkg-config --modversion ratecell is $version" test "$(pkg-config --modversion ratecell)" = "$version"

# C, through pkg-config.
warn=(-Wall -Wextra -Wpedantic -Werror)
# shellcheck disable=SC2046 # pkg-config's output is a list of flags
check "cc consumer.c \$(pkg-config --cflags --libs ratecell)" \
    "$CC" -std=c11 "${warn[@]}" tests/install/consumer.c $(pkg-config --cflags --libs ratecell) -o "$work/consumer-c"
check "the C program needs libratecell.so.$sover (the SONAME), not the file name" \
    test "$(needed_of "$work/consumer-c")" = "libratecell.so.$sover"
# The prefix is not one the loader searches: ratecell.pc records it.
check "ratecell.pc gives -Wl,-rpath,$lib (a prefix the loader does not search)" \
    sh -c "pkg-config --libs ratecell | grep -q -- '-Wl,-rpath,$lib'"
check "the C program runs against the installed library, without LD_LIBRARY_PATH" \
    env -u LD_LIBRARY_PATH "$work/consumer-c"

# Sizes: what the library costs a user, installed and statically linked.
so_max="${RATECELL_MAX_SO_BYTES:-$((2 * 1024 * 1024))}"
static_max="${RATECELL_MAX_STATIC_BYTES:-$((3 * 1024 * 1024))}"
at_most() { # at_most WHAT FILE LIMIT: prints the figure, fails above LIMIT
    local size
    size="$(stat -c %s "$2")" || return 1
    echo "size: $1: $size bytes (limit $3)"
    [ "$size" -le "$3" ]
}
check "installed libratecell.so.$version at most $so_max bytes" \
    at_most "libratecell.so.$version (installed, stripped)" "$lib/libratecell.so.$version" "$so_max"
# shellcheck disable=SC2046 # pkg-config's output is a list of flags
check "hello.c linked statically against libratecell.a (-Wl,--gc-sections)" \
    "$CC" -std=c11 "${warn[@]}" -O2 tests/install/hello.c $(pkg-config --cflags ratecell) \
    -Wl,--gc-sections "$lib/libratecell.a" -lgcc_s -lutil -lrt -lpthread -lm -ldl -o "$work/hello-static"
check "the static hello runs" "$work/hello-static"
check "the static hello needs no libratecell at run time" test -z "$(needed_of "$work/hello-static")"
check "the static hello at most $static_max bytes" \
    at_most "hello (static, -Wl,--gc-sections, not stripped)" "$work/hello-static" "$static_max"

# C++, through CMake, shared and static.
cmake_consumer() { # cmake_consumer BUILD_DIR PREFIX STATIC
    cmake -S tests/install -B "$1" -DCMAKE_PREFIX_PATH="$2" -DRATECELL_STATIC="$3" \
        -DCMAKE_BUILD_TYPE=Release >"$1.log" 2>&1 &&
        cmake --build "$1" >>"$1.log" 2>&1 || { cat "$1.log" >&2; return 1; }
}
check "cmake find_package(ratecell) + ratecell::ratecell builds" cmake_consumer "$work/build-shared" "$prefix" OFF
check "the C++ program (shared) runs" "$work/build-shared/consumer"
check "it needs libratecell.so.$sover" test "$(needed_of "$work/build-shared/consumer")" = "libratecell.so.$sover"
check "cmake find_package(ratecell) + ratecell::ratecell_static builds" cmake_consumer "$work/build-static" "$prefix" ON
check "the C++ program (static) runs" "$work/build-static/consumer"
check "it needs no libratecell at run time" test -z "$(needed_of "$work/build-static/consumer")"

# The CMake package finds the library relative to itself.
mv "$prefix" "$work/moved"
check "the CMake package works from a moved prefix" cmake_consumer "$work/build-moved" "$work/moved" OFF
check "the C++ program (moved prefix) runs" "$work/build-moved/consumer"

# A staged install for packagers.
echo "== scripts/install.sh --prefix /opt/ratecell --destdir $work/stage"
check "install.sh --destdir stages the files" sh -c "scripts/install.sh --prefix /opt/ratecell --destdir '$work/stage' >/dev/null"
check "staged: lib/libratecell.so.$sover under DESTDIR/opt/ratecell" test -L "$work/stage/opt/ratecell/lib/libratecell.so.$sover"
check "staged: ratecell.pc names the final prefix" grep -qx 'prefix=/opt/ratecell' "$work/stage/opt/ratecell/lib/pkgconfig/ratecell.pc"
check "install.sh --prefix /usr stages" sh -c "scripts/install.sh --prefix /usr --destdir '$work/stage-usr' >/dev/null"
check "staged in /usr: ratecell.pc gives no rpath (the loader searches /usr/lib)" \
    sh -c "! grep -q rpath '$work/stage-usr/usr/lib/pkgconfig/ratecell.pc'"

# A Rust crate that depends on ratecell builds what `cargo tree` lists for
# ratecell's normal and build dependencies: cbindgen must not be among them.
no_cbindgen() {
    local tree
    tree="$(cargo tree -e normal,build -p ratecell --target all --prefix none --offline 2>/dev/null ||
        cargo tree -e normal,build -p ratecell --target all --prefix none)" || return 1
    [ -n "$tree" ] && ! grep -q '^cbindgen ' <<<"$tree"
}
check "dependents do not compile cbindgen (cargo tree -e normal,build)" no_cbindgen

# The C ABI's package ships the licence texts (cargo package cannot take
# them from the repository's root): copies, which must not drift.
for f in LICENSE-MIT LICENSE-APACHE; do
    check "crates/ratecell-capi/$f is the repository's $f" cmp -s "$f" "crates/ratecell-capi/$f"
done

# Bad arguments are refused with a message, not acted on.
check "install.sh refuses an unknown argument" sh -c "! scripts/install.sh --prefx /tmp/x 2>/dev/null"
check "install.sh refuses --prefix without a directory" sh -c "! scripts/install.sh --prefix 2>/dev/null"

finish
