#!/usr/bin/env bash
# The Go table of docs/PERFORMANCE.md: ratecell through the binding beside
# go.uber.org/ratelimit and x/time/rate, and the floors (an empty cgo call;
# one cgo call straight into the C ABI, no binding), in ROUNDS rounds (default
# 5) of one run each of
#
#   cd bindings/go/bench && go test -run '^$' -bench 'CgoFloor|OneKey$|Keys1K' -benchtime 1000000x -count 1 .
#
# so that every peer and floor of a round ran minutes, not seconds, apart
# from ratecell. Prints, per case, the range over rounds of the thread's CPU
# time per op (cpu-ns/op; the slices other jobs take do not count), then the
# goals' ratios computed within each round: lowest–highest (median).
#
# Builds libratecell first (cargo build --release -p ratecell-capi); honours
# CARGO_TARGET_DIR and GO as scripts/go-tests.sh does.
set -euo pipefail

rounds="${1:-5}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
go="${GO:-go}"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
lib="$target/release"

cargo build --release -p ratecell-capi >&2
export CGO_ENABLED=1
# The library just built (link_dev.go), not the prebuilt one.
export GOFLAGS="${GOFLAGS:-} -tags=ratecell_dev"
export CGO_LDFLAGS="-L$lib ${CGO_LDFLAGS:-}"
header_hash="$(sha256sum include/ratecell.h | cut -c1-16)"
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DRATECELL_HEADER_HASH=0x$header_hash"
if [ "$lib" != "$root/target/release" ]; then
    export CGO_CFLAGS="$CGO_CFLAGS -DRATECELL_SKIP_LIBRARY_CHECK"
fi

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
cd bindings/go/bench
for r in $(seq 1 "$rounds"); do
    echo "round $r of $rounds" >&2
    "$go" test -run '^$' -bench 'CgoFloor|OneKey$|Keys1K' -benchtime 1000000x -count 1 . |
        awk -v r="$r" '/^Benchmark/ { for (i = 3; i < NF; i++) if ($(i + 1) == "cpu-ns/op") { name = $1; sub(/-[0-9]+$/, "", name); print r, name, $i } }' >>"$out"
done

awk '
{ v[$1, $2] = $3; seen[$2] = 1; if (!($2 in order)) { order[$2] = ++n; names[n] = $2 } if ($1 > rounds) rounds = $1 }
function median(xs, k,   i, j, t) {
    for (i = 2; i <= k; i++) for (j = i; j > 1 && xs[j - 1] > xs[j]; j--) { t = xs[j]; xs[j] = xs[j - 1]; xs[j - 1] = t }
    return k % 2 ? xs[(k + 1) / 2] : (xs[k / 2] + xs[k / 2 + 1]) / 2
}
function range(name,   r, k, xs) {
    k = 0; split("", xs)
    for (r = 1; r <= rounds; r++) if ((r, name) in v) xs[++k] = v[r, name]
    median(xs, k)
    return sprintf("%.1f–%.1f (median %.1f)", xs[1], xs[k], median(xs, k))
}
function ratios(a, b,   r, k, xs) {
    k = 0; split("", xs)
    for (r = 1; r <= rounds; r++) if ((r, a) in v && (r, b) in v) xs[++k] = v[r, a] / v[r, b]
    median(xs, k)
    return sprintf("%.2f–%.2f× (median %.2f×)", xs[1], xs[k], median(xs, k))
}
END {
    printf "cpu-ns/op over %d rounds:\n", rounds
    for (i = 1; i <= n; i++) printf "  %-54s %s\n", names[i], range(names[i])
    print "ratios within each round:"
    printf "  %-54s %s\n", "Allow / uber Take", ratios("BenchmarkOneKey/ratecell-allow", "BenchmarkOneKey/uber-ratelimit")
    printf "  %-54s %s\n", "Allow, coarse clock / uber Take", ratios("BenchmarkOneKey/ratecell-coarse-clock-allow", "BenchmarkOneKey/uber-ratelimit")
    printf "  %-54s %s\n", "floor (C ABI allow) / uber Take", ratios("BenchmarkOneKey/floor-c-abi-allow", "BenchmarkOneKey/uber-ratelimit")
    printf "  %-54s %s\n", "keyed 1k Check / x/time/rate map+mutex", ratios("BenchmarkKeys1K/ratecell", "BenchmarkKeys1K/x-time-rate-map-mutex")
    printf "  %-54s %s\n", "keyed 1k Check, coarse clock / x/time/rate map+mutex", ratios("BenchmarkKeys1K/ratecell-coarse-clock", "BenchmarkKeys1K/x-time-rate-map-mutex")
    printf "  %-54s %s\n", "floor (C ABI check) / x/time/rate map+mutex", ratios("BenchmarkKeys1K/floor-c-abi-check", "BenchmarkKeys1K/x-time-rate-map-mutex")
    printf "  %-54s %s\n", "floor (C ABI check, whole decision) / x/time/rate", ratios("BenchmarkKeys1K/floor-c-abi-check-decision", "BenchmarkKeys1K/x-time-rate-map-mutex")
    printf "  %-54s %s\n", "CheckBatch per key / x/time/rate", ratios("BenchmarkOneKey/ratecell-batch", "BenchmarkOneKey/x-time-rate")
}' "$out"
