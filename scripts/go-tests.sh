#!/usr/bin/env bash
# Builds libratecell (cargo build --release --lib) and runs the Go binding's
# checks against it, in bindings/go:
#
#   1. gofmt -l (no file needs formatting) and go vet ./...
#   2. go test -race ./...          (every test, under the race detector)
#   3. go test -run Parity          (the cross-language trace, on its own)
#   4. go test -bench . -benchtime 100x   (a smoke run: benchmarks compile
#                                          and run; the figures mean nothing)
#
# The package links libratecell.a from the cargo target directory: this
# script honours CARGO_TARGET_DIR by putting its release directory first on
# the cgo link path. Go modules (x/time/rate and uber's ratelimit, for the
# benchmarks) come from the Go module proxy into the module cache; nothing
# else is installed. Honours GO (the go command) and CARGO_TARGET_DIR.
#
# Prints each step and, last, "go: N passed, M failed" counting steps;
# exits non-zero on any failure.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
go="${GO:-go}"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
lib="$target/release"

if ! command -v "$go" >/dev/null 2>&1; then
    echo "missing go: install Go 1.24 or later (https://go.dev/dl/)" >&2
    echo "go: 0 passed, 1 failed"
    exit 1
fi

echo "== cargo build --release --lib"
if ! cargo build --release --lib || [ ! -f "$lib/libratecell.a" ]; then
    echo "could not build $lib/libratecell.a" >&2
    echo "go: 0 passed, 1 failed"
    exit 1
fi

export CGO_ENABLED=1
# Put this build first on the link path (the package's own -L is
# ../../target/release, the default target directory).
export CGO_LDFLAGS="-L$lib ${CGO_LDFLAGS:-}"
# Go caches compiled cgo objects by flags and package files, not by the C
# headers they include: naming the header's hash in the flags rebuilds the
# package whenever include/ratecell.h changes.
header_hash="$(sha256sum include/ratecell.h | cut -c1-16)"
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DRATECELL_HEADER_HASH=0x$header_hash"
# go.sum pins the benchmark peers; -mod=mod lets a fresh checkout fetch them.
export GOFLAGS="${GOFLAGS:-} -mod=mod"

cd bindings/go
"$go" version

STEP_PREFIX="== go" SUMMARY_PREFIX="go: "
. "$root/scripts/lib/steps.sh"

# -count=1: the library is outside Go's view, so a cached result could
# belong to another build of it.
gofmt_clean() {
    local unformatted
    unformatted="$("$("$go" env GOROOT)/bin/gofmt" -l .)" || return 1
    [ -z "$unformatted" ] || { echo "gofmt would change: $unformatted"; return 1; }
}
step gofmt gofmt_clean
step vet "$go" vet ./...
step test-race "$go" test -race -count=1 ./...
step parity "$go" test -count=1 -run 'Parity' -v ./...
step bench-smoke "$go" test -count=1 -run '^$' -bench . -benchtime 100x ./...

steps_summary
