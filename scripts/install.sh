#!/usr/bin/env bash
# Builds libratecell and installs it for C and C++ programs, laid out as
# cargo-c lays out a Rust library with a C ABI:
#
#   PREFIX/lib/libratecell.so.X.Y.Z         the shared library, SONAME libratecell.so.SOVER
#   PREFIX/lib/libratecell.so.SOVER         -> libratecell.so.X.Y.Z (what programs load)
#   PREFIX/lib/libratecell.so               -> libratecell.so.SOVER (what -lratecell finds)
#   PREFIX/lib/libratecell.a                the static library
#   PREFIX/include/ratecell.h               the C header
#   PREFIX/include/ratecell.hpp             the C++17 wrapper (header-only)
#   PREFIX/lib/pkgconfig/ratecell.pc        pkg-config --cflags --libs ratecell
#   PREFIX/lib/cmake/ratecell/ratecell{Config,ConfigVersion}.cmake
#                                           find_package(ratecell); target ratecell::ratecell
#                                           (shared) and ratecell::ratecell_static
#
# SOVER is the part of the version that promises a compatible ABI, as in
# cargo-c: MAJOR from 1.0 on, MAJOR.MINOR before (0.1 and 0.2 may differ).
#
# Usage: scripts/install.sh [--prefix DIR] [--libdir DIR] [--includedir DIR] [--destdir DIR]
#   --prefix      where to install (default /usr/local)
#   --libdir      libraries, pkg-config and CMake files (default PREFIX/lib)
#   --includedir  headers (default PREFIX/include)
#   --destdir     stage under this directory, for packagers: files go to
#                 DESTDIR/PREFIX/..., but name PREFIX/... inside them
#
# Needs cargo and a C toolchain (cc, strip); Linux only (ELF SONAME, GNU
# ld). Builds with the `dist` profile (Cargo.toml: LTO, one codegen unit,
# symbols stripped) in $CARGO_TARGET_DIR/capi (default target/capi), apart
# from the ordinary builds, because the SONAME is a link argument of this
# build only. The installed libraries carry no debug information: the
# shared library is stripped by the profile, the static library's objects
# here (`strip --strip-debug`, as Debian's dh_strip does for archives;
# honours STRIP).
# Prints the installed files; exits non-zero, naming the problem, on failure.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
prefix=/usr/local
libdir=""
includedir=""
destdir=""

usage() {
    sed -n '/^# Usage:/,/^#   --destdir/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --prefix | --libdir | --includedir | --destdir)
        [ $# -ge 2 ] && [ -n "$2" ] || { echo "install.sh: $1 needs a directory" >&2; usage; }
        case "$1" in
        --prefix) prefix="$2" ;;
        --libdir) libdir="$2" ;;
        --includedir) includedir="$2" ;;
        --destdir) destdir="$2" ;;
        esac
        shift 2
        ;;
    --prefix=* | --libdir=* | --includedir=* | --destdir=*)
        set -- "${1%%=*}" "${1#*=}" "${@:2}"
        ;;
    -h | --help) usage ;;
    *)
        echo "install.sh: unknown argument '$1'" >&2
        usage
        ;;
    esac
done

[ "$(uname -s)" = Linux ] || { echo "install.sh: Linux only (found $(uname -s))" >&2; exit 1; }
command -v cargo >/dev/null 2>&1 || { echo "install.sh: cargo not found; install Rust (https://rustup.rs)" >&2; exit 1; }

absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
prefix="$(absolute "$prefix")"
libdir="$(absolute "${libdir:-$prefix/lib}")"
includedir="$(absolute "${includedir:-$prefix/include}")"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)"
[[ "$version" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] ||
    { echo "install.sh: cannot read a MAJOR.MINOR.PATCH version from Cargo.toml (found '$version')" >&2; exit 1; }
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
if [ "$major" = 0 ]; then sover="0.$minor"; else sover="$major"; fi
real="libratecell.so.$version"
soname="libratecell.so.$sover"

target="$(absolute "${CARGO_TARGET_DIR:-$root/target}")"
build="$target/capi"
echo "== cargo rustc --profile dist -p ratecell-capi --lib (SONAME $soname) into $build" >&2
(cd "$root" && cargo rustc --profile dist -p ratecell-capi --lib --target-dir "$build" \
    --crate-type cdylib --crate-type staticlib -- -C "link-arg=-Wl,-soname,$soname")
out="$build/dist"
for f in libratecell.so libratecell.a; do
    [ -f "$out/$f" ] || { echo "install.sh: cargo produced no $out/$f" >&2; exit 1; }
done

# What Rust's standard library needs from the system when the static
# library is linked (rustc --print native-static-libs, less the libc every
# link has).
static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl"

d_lib="$destdir$libdir"
d_inc="$destdir$includedir"
install -d "$d_lib/pkgconfig" "$d_lib/cmake/ratecell" "$d_inc"
install -m 755 "$out/libratecell.so" "$d_lib/$real"
ln -sfn "$real" "$d_lib/$soname"
ln -sfn "$soname" "$d_lib/libratecell.so"
install -m 644 "$out/libratecell.a" "$d_lib/libratecell.a"
"${STRIP:-strip}" --strip-debug "$d_lib/libratecell.a"
install -m 644 "$root/include/ratecell.h" "$d_inc/ratecell.h"
install -m 644 "$root/bindings/cpp/ratecell.hpp" "$d_inc/ratecell.hpp"

# Programs linked through pkg-config against a library directory the
# dynamic loader does not search record it (an rpath), so they start
# without LD_LIBRARY_PATH; one the loader searches gets none, as
# distributions require. The loader's directories: the trusted ones and
# those ldconfig reads from /etc/ld.so.conf, compared after resolving
# links (/lib is /usr/lib on merged systems).
searched_by_loader() {
    local d want
    want="$(realpath -m "$1")"
    for d in /lib /lib64 /usr/lib /usr/lib64 \
        $( (ldconfig -v -N -X 2>/dev/null || /sbin/ldconfig -v -N -X 2>/dev/null) | grep -o '^/[^:]*'); do
        [ "$(realpath -m "$d")" = "$want" ] && return 0
    done
    return 1
}
rpath=""
searched_by_loader "$libdir" || rpath=" -Wl,-rpath,\${libdir}"

cat >"$d_lib/pkgconfig/ratecell.pc" <<EOF
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: ratecell
Description: Lock-free in-process rate limiting (C ABI of the ratecell Rust library)
Version: $version
Libs: -L\${libdir} -lratecell$rpath
Libs.private: $static_libs
Cflags: -I\${includedir}
EOF

# The CMake files find the rest relative to themselves, so an installed tree
# (or a DESTDIR staging) can be moved as a whole.
include_from_lib="$(realpath -m --relative-to="$libdir" "$includedir")"
cat >"$d_lib/cmake/ratecell/ratecellConfig.cmake" <<EOF
# CMake package of ratecell $version, written by scripts/install.sh.
#
#   find_package(ratecell $major.$minor REQUIRED)
#   target_link_libraries(app PRIVATE ratecell::ratecell)          # shared library
#   target_link_libraries(app PRIVATE ratecell::ratecell_static)   # static library
#
# Both targets carry the include directory (ratecell.h, ratecell.hpp).

get_filename_component(_ratecell_libdir "\${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
get_filename_component(_ratecell_includedir "\${_ratecell_libdir}/$include_from_lib" ABSOLUTE)

if(NOT TARGET ratecell::ratecell)
  add_library(ratecell::ratecell SHARED IMPORTED)
  set_target_properties(ratecell::ratecell PROPERTIES
    IMPORTED_LOCATION "\${_ratecell_libdir}/$real"
    IMPORTED_SONAME "$soname"
    INTERFACE_INCLUDE_DIRECTORIES "\${_ratecell_includedir}")
endif()

if(NOT TARGET ratecell::ratecell_static)
  add_library(ratecell::ratecell_static STATIC IMPORTED)
  set_target_properties(ratecell::ratecell_static PROPERTIES
    IMPORTED_LOCATION "\${_ratecell_libdir}/libratecell.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "\${_ratecell_includedir}"
    INTERFACE_LINK_LIBRARIES "$(echo "${static_libs//-l/}" | tr ' ' ';')")
endif()

unset(_ratecell_libdir)
unset(_ratecell_includedir)
EOF

cat >"$d_lib/cmake/ratecell/ratecellConfigVersion.cmake" <<EOF
# Version check of the ratecell CMake package, written by scripts/install.sh:
# a request is met by $version when it asks for no later version with the
# same $([ "$major" = 0 ] && echo "MAJOR.MINOR (before 1.0, minors may break the ABI)" || echo "MAJOR").
set(PACKAGE_VERSION "$version")
set(PACKAGE_VERSION_COMPATIBLE FALSE)
if(NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION
   AND PACKAGE_FIND_VERSION_MAJOR EQUAL $major
   AND ($major GREATER 0 OR PACKAGE_FIND_VERSION_MINOR EQUAL $minor))
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
  set(PACKAGE_VERSION_EXACT TRUE)
endif()
# A 64-bit library: not for a 32-bit build.
if(CMAKE_SIZEOF_VOID_P AND NOT CMAKE_SIZEOF_VOID_P EQUAL 8)
  set(PACKAGE_VERSION "\${PACKAGE_VERSION} (64-bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
endif()
EOF

for f in "$d_lib/$real" "$d_lib/$soname" "$d_lib/libratecell.so" "$d_lib/libratecell.a" \
    "$d_inc/ratecell.h" "$d_inc/ratecell.hpp" "$d_lib/pkgconfig/ratecell.pc" \
    "$d_lib/cmake/ratecell/ratecellConfig.cmake" "$d_lib/cmake/ratecell/ratecellConfigVersion.cmake"; do
    echo "installed $f"
done
