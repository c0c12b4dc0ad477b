#!/usr/bin/env bash
# Builds libratecell (cargo build --release -p ratecell-capi) and runs the Go binding's
# checks against it, in bindings/go:
#
#   1. gofmt -l (no file needs formatting) and go vet ./...
#   2. go test -race ./...          (every test, under the race detector)
#   3. go test -run Parity          (the cross-language trace, on its own)
#   4. go test -bench . -benchtime 100x   (a smoke run: benchmarks compile
#                                          and run; the figures mean nothing)
#   5. go vet and go test -race in bindings/go/prometheus, the separate
#      module of the HTTP middleware's Prometheus counters (client_golang),
#      and the same vet, test and benchmark smoke run in bindings/go/bench,
#      the separate module of the benchmarks against x/time/rate and uber's
#      ratelimit (so that a user's go.sum never gains them);
#   6. a user's module outside the checkout that imports the binding through
#      a replace directive: `go mod tidy` must leave its go.sum empty (the
#      binding needs no other module), and the program builds and runs;
#   7. the binding copied where no library is built: `go build` must fail
#      with the binding's own message naming `go generate`.
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

echo "== cargo build --release -p ratecell-capi"
if ! cargo build --release -p ratecell-capi || [ ! -f "$lib/libratecell.a" ]; then
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
# The package's check that the library is built looks in ../../target/release.
if [ "$lib" != "$root/target/release" ]; then
    export CGO_CFLAGS="$CGO_CFLAGS -DRATECELL_SKIP_LIBRARY_CHECK"
fi
# bench/go.sum pins the benchmark peers; -mod=mod lets a fresh checkout fetch them.
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

# The Prometheus counters' module (client_golang stays out of the core
# module, as go-redis does).
in_prometheus() { (cd prometheus && "$@"); }
step prometheus-module-vet in_prometheus "$go" vet ./...
step prometheus-module-test in_prometheus "$go" test -race -count=1 ./...

in_bench() { (cd bench && "$@"); }
step bench-module-vet in_bench "$go" vet ./...
step bench-module-test in_bench "$go" test -count=1 ./...
step bench-module-smoke in_bench "$go" test -count=1 -run '^$' -bench . -benchtime 100x ./...

work="$(mktemp -d "${TMPDIR:-/tmp}/ratecell-go.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# A user's program, in its own module outside the checkout. GOFLAGS is
# cleared: a user has no -mod=mod.
user_module() {
    local dir="$work/user"
    mkdir -p "$dir" || return 1
    cat >"$dir/main.go" <<'GO'
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/ratecell/ratecell-go"
)

func main() {
	lim, err := ratecell.New(ratecell.Config{Algorithm: ratecell.FixedWindow, Limit: 2, Period: time.Second})
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer lim.Close()
	const t0 = 1_700_000_000_000_000_000
	admitted := 0
	for i := 0; i < 3; i++ {
		if d, err := lim.Check(ratecell.Request{At: t0}); err == nil && d.Allowed {
			admitted++
		}
	}
	fmt.Printf("admitted %d of 3\n", admitted)
}
GO
    (
        cd "$dir" &&
            GOFLAGS='' "$go" mod init example.com/user &&
            GOFLAGS='' "$go" mod edit -require github.com/ratecell/ratecell-go@v0.0.0 \
                -replace "github.com/ratecell/ratecell-go=$root/bindings/go" &&
            GOFLAGS='' "$go" mod tidy
    ) || return 1
    if [ -s "$dir/go.sum" ]; then
        echo "a user's go.sum gained more than ratecell:"
        cat "$dir/go.sum"
        return 1
    fi
    local said
    said="$(cd "$dir" && GOFLAGS='' "$go" run .)" || return 1
    echo "$said"
    [ "$said" = "admitted 2 of 3" ]
}
step user-module user_module

# The binding where no library is built: its own message, not the linker's.
missing_library() {
    local copy="$work/nolib" out
    mkdir -p "$copy/bindings/go" "$copy/include" &&
        cp "$root"/bindings/go/*.go "$root/bindings/go/go.mod" "$copy/bindings/go/" &&
        cp "$root/include/ratecell.h" "$copy/include/" || return 1
    if out="$(cd "$copy/bindings/go" && CGO_CFLAGS='' CGO_LDFLAGS='' GOFLAGS='' "$go" build . 2>&1)"; then
        echo "go build succeeded without the library"
        return 1
    fi
    # The message names a command that works from a user's own module.
    echo "$out" | grep -m1 'is not built' &&
        echo "$out" | grep -q 'cargo build --release -p ratecell-capi --manifest-path'
}
step missing-library missing_library

steps_summary
