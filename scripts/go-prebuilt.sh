#!/usr/bin/env bash
# Rebuilds the Go binding's prebuilt static library from the Rust source:
#
#   bindings/go/lib/linux_amd64/libratecell.a      what the Go package links
#                                                 on linux/amd64 (without the
#                                                 build tag ratecell_dev)
#   bindings/go/lib/linux_amd64/BUILD              what it was built from: the
#                                                 header's sha256 (which
#                                                 scripts/go-tests.sh compares
#                                                 with include/ratecell.h),
#                                                 rustc's version, the commit
#
# Run it, and commit both files, whenever include/ratecell.h changes (the Go
# tests fail until then) or the library's behaviour does. The library is the
# `dist` profile's (Cargo.toml: LTO, one codegen unit), its objects stripped
# of debug information (--strip-debug, the conservative choice Debian's
# dh_strip makes for static libraries; --strip-unneeded would save another
# 2%). Linux x86-64 hosts only: the library is built for the host. Builds
# in $CARGO_TARGET_DIR/go-prebuilt (default target/go-prebuilt): in
# target/dist it would recompile ratecell-capi over the Python package's
# build of the same profile, which cargo runs with another command line
# (setuptools-rust's cargo rustc --crate-type cdylib), and the other way
# round. Honours CARGO_TARGET_DIR and STRIP. Prints the library's size.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] ||
    { echo "go-prebuilt.sh: builds the linux/amd64 library, on a Linux x86-64 host (this is $(uname -s)/$(uname -m))" >&2; exit 1; }

target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac

echo "== cargo build --profile dist -p ratecell-capi --target-dir $target/go-prebuilt" >&2
cargo build --profile dist -p ratecell-capi --target-dir "$target/go-prebuilt"
built="$target/go-prebuilt/dist/libratecell.a"
[ -f "$built" ] || { echo "go-prebuilt.sh: cargo produced no $built" >&2; exit 1; }

dir="bindings/go/lib/linux_amd64"
mkdir -p "$dir"
# -D: no time stamps or owners in the archive, so an unchanged library is
# an unchanged file.
"${STRIP:-strip}" -D --strip-debug -o "$dir/libratecell.a.tmp" "$built"
mv "$dir/libratecell.a.tmp" "$dir/libratecell.a"

{
    echo "header-sha256 $(sha256sum include/ratecell.h | cut -d' ' -f1)"
    rustc -V
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src crates/ratecell-capi include Cargo.toml Cargo.lock 2>/dev/null || echo ' (with uncommitted changes)')"
} >"$dir/BUILD"

echo "$dir/libratecell.a: $(stat -c %s "$dir/libratecell.a") bytes"
cat "$dir/BUILD"
