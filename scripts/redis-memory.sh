#!/usr/bin/env bash
# Redis memory per limited key, side by side in one run on one server
# (127.0.0.1, a free port, stopped on exit): for each way of keeping a
# limit, N keys (default 100000) are written with redis-cli --pipe, and the
# table gives INFO memory's used_memory after minus before, per key, its
# ratio to the Lua GCRA script's string, and the RDB bytes per key (SAVE's
# file size minus an empty database's, per key).
#
# Rows: every RATECELL.CHECK algorithm; CL.THROTTLE; a Lua GCRA script that
# keeps the TAT as a string with a PX expiry (the common hand-written
# limiter); SET of a 16-digit string with PX; and the floor of any module
# data type, RATECELL.FLOOR.BARE (a module value that allocates nothing:
# Redis's own object and module-value wrapper, no byte of ratecell's).
#
# Builds the module with the `floor` feature (bindings/redis/src/floor.rs),
# in release, and loads a copy of it; or loads FLOOR_MODULE, a module
# already built with that feature (memory per key is the same in any
# build). Honours CARGO_TARGET_DIR and N. Used by
# bindings/redis/README.md, "Memory"; `CHECK=1` also fails if a
# one-word algorithm's key (gcra, leaky_bucket: the module value is the
# word) costs more than the floor or 1.13 times the Lua string, or a two-
# or three-word one more than the floor plus its 32-byte block.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
export CARGO_TARGET_DIR="$target"
n="${N:-100000}"

for tool in redis-server redis-cli python3; do
    command -v "$tool" >/dev/null || {
        echo "missing $tool: apt-get install redis-server redis-tools" >&2
        exit 1
    }
done
dir="$(mktemp -d)"
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; [ -n "$pid" ] && wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
if [ -n "${FLOOR_MODULE:-}" ]; then
    cp "$FLOOR_MODULE" "$dir/floor.so"
else
    cargo build -p ratecell-redis --release --quiet --features floor
    cp "$target/release/libratecell_redis.so" "$dir/floor.so"
fi

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --loadmodule "$dir/floor.so" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break
    sleep 0.1
done
cli() { redis-cli -p "$port" "$@"; }

# A GCRA limiter as commonly written in Lua: the theoretical arrival time
# in microseconds as a string, expiring when it is reached.
lua_gcra='
local now = redis.call("TIME")
local now_us = now[1] * 1000000 + now[2]
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call("GET", KEYS[1]) or now_us)
if tat < now_us then tat = now_us end
local new_tat = tat + interval
if new_tat - now_us > interval * burst then return 0 end
redis.call("SET", KEYS[1], string.format("%d", new_tat), "PX", math.ceil((new_tat - now_us) / 1000))
return 1'
sha="$(cli SCRIPT LOAD "$lua_gcra")"

used() { cli INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }
rdb_bytes() {
    cli SAVE >/dev/null
    stat -c %s "$dir/dump.rdb"
}

cli FLUSHALL >/dev/null
empty_rdb="$(rdb_bytes)"

# row NAME COMMAND...: the command with __KEY__ for each key.
lua_bytes=""
rows=()
row() {
    local name="$1"
    shift
    cli FLUSHALL >/dev/null
    local before after rdb
    before="$(used)"
    python3 - "$n" "$@" <<'EOF' | cli --pipe >/dev/null
import sys
n = int(sys.argv[1])
words = sys.argv[2:]
out = sys.stdout.buffer
for i in range(n):
    args = [w.replace("__KEY__", f"key:{i:08d}").encode() for w in words]
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
EOF
    # Redis grows its key table incrementally (a step per command and a
    # millisecond per cron tick): measured right after the load, the old
    # and the new table may both be allocated. A second lets it finish.
    sleep 1
    after="$(used)"
    local keys
    keys="$(cli DBSIZE)"
    [ "$keys" = "$n" ] || { echo "$name: $keys keys, not $n" >&2; exit 1; }
    rdb="$(rdb_bytes)"
    local per_key rdb_per_key
    per_key="$(python3 -c "print(f'{($after - $before) / $n:.1f}')")"
    rdb_per_key="$(python3 -c "print(f'{($rdb - $empty_rdb) / $n:.1f}')")"
    [ "$name" = "Lua GCRA script (TAT string, PX)" ] && lua_bytes="$per_key"
    rows+=("$name|$per_key|$rdb_per_key")
}

row "Lua GCRA script (TAT string, PX)" EVALSHA "$sha" 1 __KEY__ 36000000 100
row "SET 16 digits PX" SET __KEY__ 1700000000000000 PX 3600000
row "floor: any module type (RATECELL.FLOOR.BARE)" RATECELL.FLOOR.BARE __KEY__ 3600000
row "RATECELL.CHECK gcra 100 1h" RATECELL.CHECK __KEY__ gcra 100 1h
row "RATECELL.CHECK leaky_bucket 100 1h" RATECELL.CHECK __KEY__ leaky_bucket 100 1h
row "RATECELL.CHECK token_bucket 100 1h" RATECELL.CHECK __KEY__ token_bucket 100 1h
row "RATECELL.CHECK fixed_window 100 1h" RATECELL.CHECK __KEY__ fixed_window 100 1h
row "RATECELL.CHECK sliding_window 100 1h" RATECELL.CHECK __KEY__ sliding_window 100 1h
row "RATECELL.CHECK bucketed_window 100 1h (10 sub-windows)" RATECELL.CHECK __KEY__ bucketed_window 100 1h
row "RATECELL.CHECK sliding_log 10 1h" RATECELL.CHECK __KEY__ sliding_log 10 1h
row "CL.THROTTLE 99 100 3600" CL.THROTTLE __KEY__ 99 100 3600

echo "redis-server $(redis-server --version | sed 's/.* v=\([^ ]*\).*/\1/'), $n keys"
echo
echo "| what each key holds | bytes per key | × Lua | RDB bytes per key |"
echo "|---|---:|---:|---:|"
for r in "${rows[@]}"; do
    IFS='|' read -r name bytes rdb <<<"$r"
    ratio="$(python3 -c "print(f'{$bytes / $lua_bytes:.2f}')")"
    echo "| $name | $bytes | $ratio | $rdb |"
done

if [ -n "${CHECK:-}" ]; then
    python3 - "${rows[@]}" <<'EOF'
import sys
rows = {r.split("|")[0]: float(r.split("|")[1]) for r in sys.argv[1:]}
floor = rows["floor: any module type (RATECELL.FLOOR.BARE)"]
lua = rows["Lua GCRA script (TAT string, PX)"]
# A one-word state is the module value itself: nothing above the floor.
# Two or three words take a block in jemalloc's 32-byte class with their
# head. Two bytes of slack for the dicts' growth.
limits = {"gcra": 0, "leaky_bucket": 0, "token_bucket": 32, "fixed_window": 32, "sliding_window": 32}
bad = [
    f"{alg}: {rows[f'RATECELL.CHECK {alg} 100 1h']} > {floor} + {extra}"
    for alg, extra in limits.items()
    if rows[f"RATECELL.CHECK {alg} 100 1h"] > floor + extra + 2
]
bad += [
    f"{alg}: {rows[f'RATECELL.CHECK {alg} 100 1h']} > 1.13 x {lua} (Lua)"
    for alg in ("gcra", "leaky_bucket")
    if rows[f"RATECELL.CHECK {alg} 100 1h"] > 1.13 * lua
]
if bad:
    sys.exit("memory per key above its bound: " + "; ".join(bad))
print("memory per key at the floor for the one-word algorithms (within 1.13x Lua), floor + block for the others")
EOF
fi
