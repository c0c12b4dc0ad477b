#!/usr/bin/env bash
# The one command for performance: runs the criterion suite
# (benches/ratecell.rs, every case beside its peers in the same run) and the
# resident-memory probe (examples/rss.rs, a fresh process per limiter), then
# prints one Markdown table with ratios and the Rust goals of issue 22.
#
#   scripts/bench.sh            # full run, about 10 minutes on 2 cores
#   scripts/bench.sh --quick    # shorter windows, about 3 minutes, noisier
#   scripts/bench.sh [--quick] [FILTER]   # only benches matching a criterion regex
#
# Criterion's own output goes to $CARGO_TARGET_DIR/ratecell-bench/bench.log.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
filter=()
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        -h | --help)
            sed -n '2,12p' "$0"
            exit 0
            ;;
        *) filter+=("$arg") ;;
    esac
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
out="$CARGO_TARGET_DIR/ratecell-bench"
mkdir -p "$out"
export CRITERION_HOME="$out/criterion"

crit=()
if [ "$quick" = 1 ]; then
    crit=(--warm-up-time 0.3 --measurement-time 0.7 --sample-size 20)
fi

start=$(date +%s)
echo "bench.sh: building and running the suite (log: $out/bench.log)" >&2
if ! cargo bench --bench ratecell -- "${crit[@]}" "${filter[@]}" >"$out/bench.log" 2>&1; then
    tail -n 30 "$out/bench.log" >&2
    echo "bench.sh: the suite failed; see $out/bench.log" >&2
    exit 1
fi
echo "bench.sh: resident memory at 1M keys" >&2
cargo build --release --example rss 2>>"$out/bench.log"
"$CARGO_TARGET_DIR/release/examples/rss" >"$out/rss.jsonl"

python3 scripts/bench_table.py --criterion "$CRITERION_HOME" --since "$start" \
    --rss "$out/rss.jsonl" --log "$out/bench.log"
