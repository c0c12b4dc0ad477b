#!/usr/bin/env bash
# Benchmarks the Redis module against its floor and its usual alternative,
# in one run on one server (127.0.0.1, a free port, stopped on exit):
#
#   RATECELL.CHECK gcra, RATECELL.CHECK sliding_window, CL.THROTTLE,
#   INCR (the cheapest one-key write: the floor), and a small Lua GCRA
#   through EVALSHA (what most users run today);
#
# each with redis-benchmark over random keys (-r 100000), unpipelined and
# pipelined (-P 16). Prints a Markdown table of requests per second, the
# ratios of the pipelined run to INCR and to the Lua script with the same
# limit, and the server's own µs per call (INFO commandstats).
#
# Needs redis-server, redis-benchmark (redis-tools) and the module, which it
# builds (cargo build -p ratecell-redis --release). Honours CARGO_TARGET_DIR,
# N (requests per measurement, default 1000000), CLIENTS (default 50).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
export CARGO_TARGET_DIR="$target"
n="${N:-1000000}"
clients="${CLIENTS:-50}"
module="$target/release/libratecell_redis.so"

for tool in redis-server redis-benchmark redis-cli; do
    command -v "$tool" >/dev/null || {
        echo "missing $tool: apt-get install redis-server redis-tools" >&2
        exit 1
    }
done
cargo build -p ratecell-redis --release --quiet

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
dir="$(mktemp -d)"
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --loadmodule "$module" >"$dir/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
    redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break
    sleep 0.1
done

# GCRA in Lua, on the server's clock in µs: the state is the theoretical
# arrival time; ARGV = emission interval (µs), tolerance = burst × interval.
lua='local t = redis.call("TIME")
local now = t[1] * 1000000 + t[2]
local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call("GET", KEYS[1])) or now
if tat < now then tat = now end
local new = tat + interval
if new - now > tolerance then return {0, new - tolerance - now} end
redis.call("SET", KEYS[1], new, "PX", math.ceil((new - now) / 1000))
return {1, 0}'
sha="$(redis-cli -p "$port" SCRIPT LOAD "$lua")"

# Two shapes of limit: 1000/s, whose keys expire about 1 ms after each
# request (so most requests create a key and the server expires as many),
# and 100/h, whose keys stay live through the run and are updated in place,
# as INCR's are. The Lua script gets the same two limits (interval and
# tolerance in µs).
names=("RATECELL.CHECK gcra 1000/s" "RATECELL.CHECK sliding_window 1000/s" "CL.THROTTLE 1000/s"
    "Lua GCRA (EVALSHA) 1000/s" "RATECELL.CHECK gcra 100/h" "RATECELL.CHECK sliding_window 100/h"
    "Lua GCRA (EVALSHA) 100/h" "INCR (floor)")
commands=(
    "RATECELL.CHECK k:__rand_int__ gcra 1000 1s"
    "RATECELL.CHECK k:__rand_int__ sliding_window 1000 1s"
    "CL.THROTTLE k:__rand_int__ 999 1000 1"
    "EVALSHA $sha 1 k:__rand_int__ 1000 1000000"
    "RATECELL.CHECK k:__rand_int__ gcra 100 1h"
    "RATECELL.CHECK k:__rand_int__ sliding_window 100 1h"
    "EVALSHA $sha 1 k:__rand_int__ 36000000 3600000000"
    "INCR k:__rand_int__"
)

# rps PIPELINE COMMAND...: requests per second of one redis-benchmark run.
rps() {
    local pipeline="$1"
    shift
    redis-cli -p "$port" FLUSHALL >/dev/null
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    redis-benchmark -p "$port" -n "$n" -c "$clients" -r 100000 -P "$pipeline" --csv "$@" |
        awk -F'"' 'NR > 1 && $4 != "" { print int($4) }' | tail -1
}

# usec NAME: the server's own time per call of command NAME in the last run
# (INFO commandstats), which the load on the machine disturbs far less than
# the throughput seen by a client sharing its cores.
usec() {
    redis-cli -p "$port" INFO commandstats | tr -d '\r' |
        sed -n "s/^cmdstat_$1:.*usec_per_call=\([0-9.]*\).*/\1/p"
}

declare -a plain piped cost
stat_names=("ratecell.check" "ratecell.check" "cl.throttle" "evalsha" "ratecell.check"
    "ratecell.check" "evalsha" "incr")
for i in "${!commands[@]}"; do
    # shellcheck disable=SC2086 # the command's words are separate arguments
    plain[i]="$(rps 1 ${commands[i]})"
    # shellcheck disable=SC2086
    piped[i]="$(rps 16 ${commands[i]})"
    cost[i]="$(usec "${stat_names[i]}")"
done

incr=${piped[7]}
echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $clients clients, $n requests per cell, keys over 100k, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| command | unpipelined (req/s) | -P 16 (req/s) | -P 16 ÷ INCR | -P 16 ÷ Lua, same limit | server µs/call (-P 16) |"
echo "|---|---:|---:|---:|---:|---:|"
for i in "${!commands[@]}"; do
    # The Lua run with the same limit: row 3 for the 1000/s rows, 6 for 100/h.
    lua=""
    case $i in 0 | 1 | 2) lua=${piped[3]} ;; 4 | 5) lua=${piped[6]} ;; esac
    ratio="-"
    [ -n "$lua" ] && ratio="$(printf '%.2f' "$(echo "${piped[i]} / $lua" | bc -l)")"
    printf '| %s | %s | %s | %.2f | %s | %s |\n' "${names[i]}" "${plain[i]}" "${piped[i]}" \
        "$(echo "${piped[i]} / $incr" | bc -l)" "$ratio" "${cost[i]}"
done
