#!/usr/bin/env bash
# Instructions per command inside redis-server, counted by valgrind's
# callgrind: unlike requests per second, the count does not move with the
# load on a shared machine. For each command: a server under callgrind
# (127.0.0.1, a free port, stopped on exit) with the module built with the
# `floor` feature; WARM requests untimed, then N requests with -P 16 over
# random keys (-r 100000) counted; prints instructions per request (the
# whole server: reading, parsing, the command, the reply).
#
# Rows: INCR (the issue's floor), RATECELL.FLOOR.NOOP and
# RATECELL.FLOOR.WRITE (bindings/redis/src/floor.rs: a module command that
# does nothing, and one that does only a check's Redis work), RATECELL.CHECK
# and CL.THROTTLE on live keys, the Lua GCRA of scripts/redis-bench.sh, and
# RATECELL.CHECK on keys that expire 1 ms after each request (whose count
# depends on how many expire during the run, so on the machine's speed).
#
# Needs valgrind, redis-server, redis-benchmark, redis-cli. Honours
# CARGO_TARGET_DIR, N (default 100000), WARM (default 200000), MODULE (a
# prebuilt module to measure instead of building one; the floor rows then
# need it built with `--features floor`).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
export CARGO_TARGET_DIR="$target"
n="${N:-100000}"
warm="${WARM:-200000}"

for tool in valgrind callgrind_control callgrind_annotate redis-server redis-benchmark redis-cli; do
    command -v "$tool" >/dev/null || {
        echo "missing $tool: apt-get install valgrind redis-server redis-tools" >&2
        exit 1
    }
done
dir="$(mktemp -d)"
vg=""
trap '[ -n "$vg" ] && kill $vg 2>/dev/null; [ -n "$vg" ] && wait $vg 2>/dev/null; rm -rf "$dir"' EXIT
if [ -n "${MODULE:-}" ]; then
    cp "$MODULE" "$dir/module.so"
else
    cargo build -p ratecell-redis --release --quiet --features floor
    cp "$target/release/libratecell_redis.so" "$dir/module.so"
fi

# The same script as scripts/redis-bench.sh's, loaded by its body.
lua="$(sed -n "/^lua='/,/^return {1, 0}'/p" scripts/redis-bench.sh | sed "1s/^lua='//; \$s/'\$//")"
printf '%s' "$lua" >"$dir/gcra.lua"
sha="$(sha1sum "$dir/gcra.lua" | cut -d' ' -f1)"

# count COMMAND...: instructions per request of N pipelined COMMANDs.
count() {
    local port out
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    out="$dir/cg.$port"
    valgrind --tool=callgrind --callgrind-out-file="$out.%p" --instr-atstart=no \
        redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
        --loadmodule "$dir/module.so" >"$dir/log.$port" 2>&1 &
    vg=$!
    for _ in $(seq 600); do
        redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break
        sleep 0.2
    done
    redis-cli -p "$port" -x SCRIPT LOAD <"$dir/gcra.lua" >/dev/null
    # A module built without the floor feature has no floor commands.
    if redis-cli -p "$port" "${@//__rand_int__/0}" 2>&1 | grep -q "unknown command"; then
        redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
        wait "$vg" || true
        vg=""
        echo "-"
        return
    fi
    redis-benchmark -p "$port" -n "$warm" -c 20 -r 100000 -P 16 -q "$@" >/dev/null 2>&1
    callgrind_control -i on "$vg" >/dev/null 2>&1
    redis-benchmark -p "$port" -n "$n" -c 20 -r 100000 -P 16 -q "$@" >/dev/null 2>&1
    callgrind_control -i off "$vg" >/dev/null 2>&1
    callgrind_control -d "$vg" >/dev/null 2>&1
    redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    wait "$vg" || true
    vg=""
    local total
    total="$(callgrind_annotate "$(ls "$out".*.1 | head -1)" 2>/dev/null |
        awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')"
    echo $((total / n))
}

echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), callgrind, -P 16, 20 clients, $n requests counted after $warm, keys over 100k, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| command | instructions per request | ÷ INCR |"
echo "|---|---:|---:|"
# Live keys are "100/d" here, not redis-bench.sh's 100/h: callgrind slows
# the server about fifty times, and a 100/h key idle for 36 s would expire
# during the count (and be created again), which INCR's keys never do.
names=("INCR" "RATECELL.FLOOR.NOOP (4 arguments)" "RATECELL.FLOOR.WRITE (4 arguments)"
    "RATECELL.CHECK gcra 100/d" "RATECELL.CHECK sliding_window 100/d" "CL.THROTTLE 100/d"
    "Lua GCRA (EVALSHA) 100/d" "RATECELL.CHECK gcra 1000/s")
commands=(
    "INCR k:__rand_int__"
    "RATECELL.FLOOR.NOOP k:__rand_int__ gcra 100 1d"
    "RATECELL.FLOOR.WRITE k:__rand_int__ gcra 100 1d"
    "RATECELL.CHECK k:__rand_int__ gcra 100 1d"
    "RATECELL.CHECK k:__rand_int__ sliding_window 100 1d"
    "CL.THROTTLE k:__rand_int__ 99 100 86400"
    "EVALSHA $sha 1 k:__rand_int__ 864000000 86400000000"
    "RATECELL.CHECK k:__rand_int__ gcra 1000 1s"
)
incr=""
for i in "${!commands[@]}"; do
    # shellcheck disable=SC2086 # the command's words are separate arguments
    got="$(count ${commands[i]})"
    [ -n "$incr" ] || incr="$got"
    ratio="-"
    [ "$got" = "-" ] || ratio="$(printf '%.2f' "$(echo "$got / $incr" | bc -l)")"
    printf '| %s | %s | %s |\n' "${names[i]}" "$got" "$ratio"
done
