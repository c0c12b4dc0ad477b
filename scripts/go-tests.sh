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
#   6. the prebuilt library the module ships for linux/amd64
#      (bindings/go/lib/linux_amd64, scripts/go-prebuilt.sh): it was built
#      from the current include/ratecell.h (the sha256 its BUILD file
#      records) and defines every function the header declares (nm); the
#      package's tests pass linked to it;
#   7. a user's module outside the checkout that imports the binding through
#      a replace directive into a copy of the module where nothing was
#      built, with no Rust toolchain on PATH: `go mod tidy` must leave its
#      go.sum empty (the binding needs no other module), and `go build` and
#      the program must succeed on the prebuilt library alone;
#   8. the binding where it has no library: with -tags ratecell_dev and no
#      cargo build, and on a platform without a prebuilt library, the build
#      stops with the binding's own message naming a cargo command that
#      works from a user's own directory.
#
# Steps 1-5 build with the tag ratecell_dev, so they test the library just
# built from this checkout (link_dev.go), not the prebuilt one; they honour
# CARGO_TARGET_DIR by putting its release directory first on the cgo link
# path. Go modules (x/time/rate and uber's ratelimit, for the benchmarks)
# come from the Go module proxy into the module cache; nothing else is
# installed. Honours GO (the go command) and CARGO_TARGET_DIR.
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
# ratecell_dev: link the library just built, not the prebuilt one.
export GOFLAGS="${GOFLAGS:-} -mod=mod -tags=ratecell_dev"

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

prebuilt="$root/bindings/go/lib/linux_amd64"

# The prebuilt library cannot go stale unseen: it records the header it was
# built from, and must define every function that header declares.
prebuilt_matches_header() {
    local want have missing=() f
    want="$(sha256sum "$root/include/ratecell.h" | cut -d' ' -f1)"
    have="$(sed -n 's/^header-sha256 //p' "$prebuilt/BUILD" 2>/dev/null)"
    if [ "$want" != "$have" ]; then
        echo "lib/linux_amd64 was built from another include/ratecell.h (BUILD says ${have:-nothing}, the header is $want): run scripts/go-prebuilt.sh and commit its output"
        return 1
    fi
    local defined
    defined="$(nm -g --defined-only "$prebuilt/libratecell.a" 2>/dev/null | awk '$2 == "T" {print $3}' | sort -u)" || return 1
    for f in $(grep -o '\bratecell_[a-z0-9_]*(' "$root/include/ratecell.h" | tr -d '(' | sort -u); do
        grep -qx "$f" <<<"$defined" || missing+=("$f")
    done
    [ "$(grep -c . <<<"$defined")" -gt 0 ] || { echo "nm finds no function in $prebuilt/libratecell.a"; return 1; }
    if [ ${#missing[@]} -gt 0 ]; then
        echo "lib/linux_amd64/libratecell.a lacks: ${missing[*]} (run scripts/go-prebuilt.sh)"
        return 1
    fi
    echo "$(stat -c %s "$prebuilt/libratecell.a") bytes; $(grep -o '\bratecell_[a-z0-9_]*(' "$root/include/ratecell.h" | sort -u | grep -c .) header functions defined"
}
step prebuilt-abi prebuilt_matches_header

# The package's tests, linked to the prebuilt library (no tag, no -L).
on_prebuilt() { CGO_LDFLAGS='' GOFLAGS='-mod=mod' "$@"; }
step prebuilt-test on_prebuilt "$go" test -count=1 .

# The module as a user's replace directive sees it, where nothing was built:
# the package's files, its prebuilt library and the header it includes.
copy_module() { # copy_module DIR: DIR/bindings/go and DIR/include
    mkdir -p "$1/bindings/go" "$1/include" &&
        cp "$root"/bindings/go/*.go "$root/bindings/go/go.mod" "$1/bindings/go/" &&
        cp "$root/include/ratecell.h" "$1/include/"
}

# PATH without any directory holding cargo, rustc or rustup.
rustless_path() {
    local d out=""
    local IFS=:
    for d in $PATH; do
        [ -n "$d" ] || continue
        [ -e "$d/cargo" ] || [ -e "$d/rustc" ] || [ -e "$d/rustup" ] || out="${out:+$out:}$d"
    done
    echo "$out"
}

# A user's program, in its own module outside the checkout, built with the
# Go toolchain and a C compiler only. GOFLAGS and the cgo flags are cleared:
# a user has none of this script's.
user_module() {
    local dir="$work/user" copy="$work/checkout"
    copy_module "$copy" && mkdir -p "$copy/bindings/go/lib" &&
        cp -r "$prebuilt" "$copy/bindings/go/lib/" || return 1
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
    local path
    path="$(rustless_path)"
    user() { (cd "$dir" && env PATH="$path" CARGO_HOME=/nonexistent RUSTUP_HOME=/nonexistent \
        GOFLAGS='' CGO_ENABLED=1 CGO_CFLAGS='' CGO_LDFLAGS='' "$@"); }
    if user sh -c 'command -v cargo || command -v rustc'; then
        echo "cargo or rustc still on the trimmed PATH"
        return 1
    fi
    user "$go" mod init example.com/user &&
        user "$go" mod edit -require github.com/ratecell/ratecell-go@v0.0.0 \
            -replace "github.com/ratecell/ratecell-go=$copy/bindings/go" &&
        user "$go" mod tidy || return 1
    if [ -s "$dir/go.sum" ]; then
        echo "a user's go.sum gained more than ratecell:"
        cat "$dir/go.sum"
        return 1
    fi
    user "$go" build -o app . || return 1
    if readelf -d "$dir/app" | grep -q 'libratecell'; then
        echo "the program needs libratecell at run time"
        return 1
    fi
    echo "$(stat -c %s "$dir/app") bytes (not stripped)"
    local said
    said="$("$dir/app")" || return 1
    echo "$said"
    [ "$said" = "admitted 2 of 3" ]
}
step user-module-without-rust user_module

# With -tags ratecell_dev and nothing built: the binding's own message, not
# the linker's.
missing_library() {
    local copy="$work/nolib" out
    copy_module "$copy" || return 1
    if out="$(cd "$copy/bindings/go" && CGO_CFLAGS='' CGO_LDFLAGS='' GOFLAGS='' "$go" build -tags ratecell_dev . 2>&1)"; then
        echo "go build -tags ratecell_dev succeeded without the library"
        return 1
    fi
    # The message names a command that works from a user's own module.
    echo "$out" | grep -m1 'is not built' &&
        echo "$out" | grep -q 'cargo build --release -p ratecell-capi --manifest-path'
}
step missing-library missing_library

# Another platform: link_other.go is the one built there, and its preamble
# stops the build with the commands to run. (Cross-building runtime/cgo
# needs that platform's C compiler, so the preamble is run through cgo
# directly, as a build there would.)
other_platform() {
    local files out
    files="$(cd "$root/bindings/go" && GOOS=linux GOARCH=arm64 CGO_ENABLED=1 GOFLAGS='' "$go" list -f '{{.CgoFiles}}' .)" || return 1
    echo "linux/arm64 builds: $files"
    case "$files" in *link_other.go*) ;; *) echo "link_other.go is not among them"; return 1 ;; esac
    case "$files" in *link_prebuilt*) echo "the linux/amd64 library is"; return 1 ;; esac
    mkdir -p "$work/cgo-other"
    if out="$(cd "$root/bindings/go" && "$go" tool cgo -objdir "$work/cgo-other" link_other.go 2>&1)"; then
        echo "link_other.go's preamble compiled"
        return 1
    fi
    echo "$out" | grep -m1 -o 'ratecell: no prebuilt library[^"]*' &&
        echo "$out" | grep -q 'cargo build --release -p ratecell-capi --manifest-path' &&
        echo "$out" | grep -q 'go build -tags ratecell_dev'
}
step other-platform other_platform

steps_summary
