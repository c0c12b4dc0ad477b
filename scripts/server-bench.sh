#!/usr/bin/env bash
# Measures, side by side in one run, envoyproxy/ratelimit (its Redis
# backend) and ratecell-server in memory, on Redis strict and on Redis
# leased: the same configuration, the same load (rlsload: 16 workers, each
# on its own gRPC connection, 10 s after a 1 s warm-up, descriptor values
# drawn from 100, so that each value sees enough traffic for a lease to be
# reused), one Redis with ratecell's module for all of them (the incumbent
# uses plain INCRBY/EXPIRE on it). Prints a Markdown table: requests per
# second, p50 and p99 latency, Redis commands per request (INFO
# commandstats before and after).
#
# Builds what it needs as scripts/server-tests.sh does (the pinned
# service_cmd, ratecell-server and the module), but in release for
# ratecell. A measurement, not a test: it fails only when a server does not
# start or answers no request (errors are a column of the table).
# RATECELL_SERVER_BIN and RATECELL_REDIS_MODULE override the builds. Honours CARGO_TARGET_DIR, GO, BENCH_SERVERS
# (incumbent memory strict leased), BENCH_DURATION (10s), BENCH_WORKERS (16)
# and BENCH_KEYS (100).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
. "$root/scripts/lib/interop.sh"
duration="${BENCH_DURATION:-10s}"
workers="${BENCH_WORKERS:-16}"
keys="${BENCH_KEYS:-100}"

. "$root/scripts/lib/workspace.sh"
system_packages >&2

bin="$target/interop/bin"
mkdir -p "$bin"
echo "building the peers and ratecell-server (release)" >&2
GOBIN="$bin" "$go" install "github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION" >&2
(cd crates/ratecell-server/interop && "$go" build -o "$bin/rlsload" ./cmd/rlsload) >&2
# RATECELL_SERVER_BIN and RATECELL_REDIS_MODULE, when set, are used as
# they are (a build made elsewhere); otherwise this checkout's release.
server_bin="${RATECELL_SERVER_BIN:-}"
module="${RATECELL_REDIS_MODULE:-}"
if [ -z "$server_bin" ] && [ "${BENCH_SERVERS:-}" != incumbent ]; then
    cargo build --release -p ratecell-server --quiet >&2
    server_bin="$target/release/ratecell-server"
fi
if [ -z "$module" ]; then
    cargo build --release -p ratecell-redis --quiet >&2
    module="$target/release/libratecell_redis.so"
fi

work="$(mktemp -d)"
redis_pid=""
server_pid=""
# stop PID: SIGTERM, then SIGKILL after 10 s.
stop() {
    [ -n "$1" ] || return 0
    kill "$1" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
cleanup() {
    stop "$server_pid"
    stop "$redis_pid"
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for URL: polls (at most 60 s) until URL answers 200.
wait_for() {
    for _ in $(seq 600); do
        curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "no answer from $1" >&2
    return 1
}

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --loadmodule "$module" >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 600); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$redis_port" ping >/dev/null

mkdir -p "$work/runtime/ratelimit/config"
cat >"$work/runtime/ratelimit/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000}
EOF

# run LABEL DOMAIN BIN ENV...: starts the server with the common
# environment and ENV, loads it with requests for DOMAIN, prints a table
# row, stops it.
run() {
    local label="$1" domain="$2" server="$3"
    shift 3
    local http grpc debug log="$work/server-$RANDOM.log"
    http="$(free_port)" grpc="$(free_port)" debug="$(free_port)"
    redis-cli -p "$redis_port" flushall >/dev/null
    env USE_STATSD=false LOG_LEVEL=warn RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit \
        RUNTIME_WATCH_ROOT=false RUNTIME_APPDIRECTORY=config HOST=127.0.0.1 GRPC_HOST=127.0.0.1 \
        DEBUG_HOST=127.0.0.1 PORT="$http" GRPC_PORT="$grpc" DEBUG_PORT="$debug" "$@" \
        "$server" >"$log" 2>&1 &
    server_pid=$!
    if ! wait_for "http://127.0.0.1:$http/healthcheck"; then
        tail -20 "$log" >&2
        return 1
    fi
    local redis_flag=()
    case " $* " in *REDIS_URL=*) redis_flag=(-redis "127.0.0.1:$redis_port") ;; esac
    "$bin/rlsload" -addr "127.0.0.1:$grpc" -domain "$domain" -key k -keys "$keys" -workers "$workers" \
        -duration "$duration" "${redis_flag[@]}" -md "$label"
    stop "$server_pid"
    server_pid=""
}

redis_env=(REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" BACKEND_TYPE=redis)
# BENCH_SERVERS narrows the rows: any of incumbent, memory, strict, leased,
# floor.
servers=" ${BENCH_SERVERS:-incumbent memory strict leased floor} "
want() { [[ "$servers" == *" $1 "* ]]; }
echo "| server | requests/s | p50 | p99 | Redis commands/request | OVER_LIMIT | errors |"
echo "|---|---|---|---|---|---|---|"
want incumbent && run "envoyproxy/ratelimit (Redis)" bench "$bin/service_cmd" "${redis_env[@]}"
want memory && run "ratecell-server memory" bench "$server_bin" BACKEND_TYPE=memory
want strict && run "ratecell-server strict (Redis)" bench "$server_bin" "${redis_env[@]}" RATECELL_REDIS_MODE=strict
want leased && run "ratecell-server leased (Redis)" bench "$server_bin" "${redis_env[@]}" RATECELL_REDIS_MODE=leased
# The same, its grants sized for a few replicas rather than SPEC §8's
# fleet default (docs/SERVER.md, RATECELL_LEASE_SHARE).
want leased && run "ratecell-server leased (Redis), RATECELL_LEASE_SHARE=50" bench "$server_bin" "${redis_env[@]}" RATECELL_REDIS_MODE=leased RATECELL_LEASE_SHARE=50
# The floor: requests for a domain no file configures, which each server
# answers OK without limiting anything (no Redis, no table): the gRPC round
# trip and the load generator alone, on the same two cores.
want floor && run "floor: ratecell-server, no limit" unconfigured "$server_bin" BACKEND_TYPE=memory
want floor && run "floor: envoyproxy/ratelimit, no limit" unconfigured "$bin/service_cmd" "${redis_env[@]}"
echo
echo "$(nproc) cores, $workers workers, $duration after a 1 s warm-up, $keys descriptor values, limit 1000/s per value; $(date -u +%Y-%m-%dT%H:%MZ)"
