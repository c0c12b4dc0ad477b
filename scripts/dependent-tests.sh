#!/usr/bin/env bash
# What a Rust program that depends on ratecell compiles: a throwaway crate
# in a temporary directory outside the checkout, depending on ratecell by
# path, built with `cargo build` into its own target directory. That
# directory must hold ratecell as a Rust library only: no libratecell.a or
# libratecell.so, no static library of any kind (the C library is
# crates/ratecell-capi's, which a Rust dependent never builds), and no
# cbindgen. Prints the size of the target directory it made, and removes it.
#
# Needs cargo; builds offline when the crates are cached (the checkout's
# Cargo.lock pins their versions), else fetches them. Prints one line per
# check and, last, "N passed, M failed"; exits non-zero if any failed.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"

. "$root/scripts/lib/checks.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/ratecell-dependent.XXXXXX")"
trap 'rm -rf "$work"' EXIT
crate="$work/dependent"
mkdir -p "$crate/src"
cat >"$crate/Cargo.toml" <<TOML
[package]
name = "dependent"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
ratecell = { path = "$root" }

# Not a member of any workspace above the temporary directory.
[workspace]
TOML
cat >"$crate/src/main.rs" <<'RUST'
use ratecell::{Algorithm, Config, Limiter};

fn main() {
    let limiter = Limiter::builder()
        .limit(Config::new(Algorithm::Gcra, 5, 1_000_000_000))
        .build()
        .unwrap();
    println!("admitted: {}", limiter.check(1).allowed);
}
RUST
# The versions the checkout is tested with (cargo drops what is not used).
cp "$root/Cargo.lock" "$crate/Cargo.lock"

build() {
    # Its own target directory, whatever CARGO_TARGET_DIR says, so what is
    # found there is this crate's build and nothing else's.
    (cd "$crate" && unset CARGO_TARGET_DIR &&
        { cargo build --quiet --offline 2>/dev/null || cargo build --quiet; } &&
        cargo run --quiet --offline >/dev/null)
}
check "a crate depending on ratecell by path builds and runs (cargo build)" build

found() { # found NAME-PATTERN: the files under target/ whose names match
    find "$crate/target" -name "$1" -print | sed "s|^$crate/||"
}
nothing() { # nothing WHAT PATTERN...: no file under target/ matches any PATTERN
    local what="$1" pattern files=""
    shift
    for pattern in "$@"; do
        files+="$(found "$pattern")"
    done
    [ -z "$files" ] || { echo "$what in the dependent's target/:" >&2; echo "$files" >&2; return 1; }
}
check "ratecell was built as a Rust library (libratecell*.rlib)" \
    test -n "$(found 'libratecell*.rlib')"
check "no static library (*.a), no libratecell.a" nothing "a static library" '*.a'
check "no shared library of ratecell (libratecell*.so*, .dylib)" \
    nothing "a C library" 'libratecell*.so*' 'libratecell*.dylib'
check "no cbindgen compiled" nothing "cbindgen" 'cbindgen-*'
[ -d "$crate/target" ] &&
    echo "the dependent's target/ (a debug build): $(du -sh "$crate/target" | cut -f1)"

checks_summary
