#!/usr/bin/env bash
# The floors under the Redis module's benchmark (scripts/redis-bench.sh),
# in one run on one server (127.0.0.1, a free port, stopped on exit):
#
#   INCR                      the cheapest one-key write (the issue's floor);
#   RATECELL.FLOOR.NOOP       a module command with a check's arguments that
#                             does nothing (Redis's module dispatch);
#   RATECELL.FLOOR.WRITE      what a check must do inside Redis, with no
#                             parsing and no decision: open the key, update
#                             the state in place, set its expiry, replicate
#                             it as RATECELL.RESTORE, reply six integers;
#   RATECELL.CHECK gcra 100/h the real command, keys live and updated in
#                             place (as the floors' are).
#
# Each with redis-benchmark -P 16 over random keys (-r 100000), in ROUNDS
# alternating rounds; prints requests per second, the ratio to INCR of the
# same round and the server's µs per call (INFO commandstats).
#
# Builds the module with the `floor` feature (bindings/redis/src/floor.rs)
# and loads a copy of it. Honours CARGO_TARGET_DIR, N (requests per
# measurement, default 300000), CLIENTS (default 50), ROUNDS (default 3).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
export CARGO_TARGET_DIR="$target"
n="${N:-300000}"
clients="${CLIENTS:-50}"
rounds="${ROUNDS:-3}"

for tool in redis-server redis-benchmark redis-cli; do
    command -v "$tool" >/dev/null || {
        echo "missing $tool: apt-get install redis-server redis-tools" >&2
        exit 1
    }
done
dir="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; [ -n "$pid" ] && wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
cargo build -p ratecell-redis --release --quiet --features floor
cp "$target/release/libratecell_redis.so" "$dir/floor.so"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --loadmodule "$dir/floor.so" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break
    sleep 0.1
done

names=("INCR" "RATECELL.FLOOR.NOOP" "RATECELL.FLOOR.WRITE" "RATECELL.CHECK gcra 100/h")
commands=(
    "INCR k:__rand_int__"
    "RATECELL.FLOOR.NOOP k:__rand_int__ gcra 100 1h"
    "RATECELL.FLOOR.WRITE k:__rand_int__ gcra 100 1h"
    "RATECELL.CHECK k:__rand_int__ gcra 100 1h"
)
stats=("incr" "ratecell.floor.noop" "ratecell.floor.write" "ratecell.check")

rps() {
    redis-cli -p "$port" FLUSHALL >/dev/null
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    redis-benchmark -p "$port" -n "$n" -c "$clients" -r 100000 -P 16 --csv "$@" |
        awk -F'"' 'NR > 1 && $4 != "" { print int($4) }' | tail -1
}
usec() {
    redis-cli -p "$port" INFO commandstats | tr -d '\r' |
        sed -n "s/^cmdstat_$1:.*usec_per_call=\([0-9.]*\).*/\1/p"
}

echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), -P 16, $clients clients, $n requests per cell, keys over 100k, $rounds rounds, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| round | command | -P 16 (req/s) | ÷ INCR | server µs/call |"
echo "|---:|---|---:|---:|---:|"
for r in $(seq "$rounds"); do
    declare -a got us
    for i in "${!commands[@]}"; do
        # shellcheck disable=SC2086 # the command's words are separate arguments
        got[i]="$(rps ${commands[i]})"
        us[i]="$(usec "${stats[i]}")"
    done
    for i in "${!commands[@]}"; do
        printf '| %s | %s | %s | %.2f | %s |\n' "$r" "${names[i]}" "${got[i]}" \
            "$(echo "${got[i]} / ${got[0]}" | bc -l)" "${us[i]}"
    done
done
