#!/usr/bin/env bash
# Tests the Redis module (bindings/redis) and its clients on real servers:
#
#   1. installs what is missing (scripts/lib/workspace.sh): redis-server,
#      redis-tools and libclang-dev;
#   2. the workspace's debug test build, as scripts/test.sh's rust step
#      makes it (fresh when that step ran: the same packages and
#      features), which holds the module, its Rust client and the HTTP
#      layer's Redis stores; their lints are test.sh's clippy step, and the
#      client's own tests (four processes sharing one limit, command counts
#      per mode, a server paused and one restarted) run in its rust step;
#   3. the server tests, marked ignored (bindings/redis/tests/*.rs, and
#      crates/ratecell-tower/tests/redis_*.rs): each starts its own
#      redis-server(s) on free 127.0.0.1 ports with the module of that build
#      and stops them when it ends, passing or not. The module's: AT traces
#      equal to the in-process Limiter, PTTL, a million keys' memory,
#      RDB/AOF restarts, an RDB of the first encoding, a replica promoted, a
#      three-master cluster, one-instant races, named errors, CL.THROTTLE
#      against replies recorded from redis-cell, redis-cell's TAT strings
#      continued both ways (written by hand, through an RDB, an AOF and a
#      replica; tests/redis_cell.rs), the one-word states' data types
#      (tests/words.rs), hostile arguments in every
#      position and hostile stored states through RATECELL.RESTORE and
#      RESTORE of DUMP payloads. The HTTP layer's stores': two layers
#      sharing one limit, a server paused with SIGSTOP and one killed,
#      answered by the failure policy within the store's timeout; each of
#      the client's modes refusing over the limit with the same fields,
#      cached_deny's remembered refusals sending no command. Redis Cluster
#      (three masters with the module, made by
#      crates/ratecell-redis-client/tests/support/cluster.rs): the client's
#      strict and leased modes exact with keys on every master, each key on
#      the master of its slot (crates/ratecell-redis-client/tests/cluster.rs),
#      and ratecell-server's strict and leased backends on one
#      (crates/ratecell-server/tests/redis_cluster.rs);
#   4. the Python client (ratecell.redis, installed with the `redis` extra
#      into a venv under the target dir, plus uvicorn and starlette for the
#      HTTP middlewares' tests; its strict, cached_deny and leased modes,
#      and one limit shared by two Python, one Go and one Rust process,
#      whose Go and Rust nodes are built first) and the Go client
#      (bindings/go/redis: gofmt, go vet, go test) against one server this
#      script starts, with the module, and always stops; the store-timeout
#      tests start their own server from RATECELL_REDIS_MODULE, pause it
#      with SIGSTOP and always continue and kill it;
#   5. memory per key against the floor of any module data type
#      (scripts/redis-memory.sh, with the module of the test build made
#      again with the `floor` feature).
#
# Honours CARGO_TARGET_DIR, PYTHON and GO. Every step is bounded by
# `timeout`. Prints each step and "redis: N passed, M failed"; exits non-zero
# on any failure.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
export CARGO_TARGET_DIR="$target"
python="${PYTHON:-python3}"
go="${GO:-go}"

STEP_PREFIX="== redis"
SUMMARY_PREFIX="redis: "
. "$root/scripts/lib/steps.sh"

. "$root/scripts/lib/workspace.sh"
module="$workspace_module"
step packages system_packages
step fmt cargo fmt -p ratecell-redis -- --check
step build timeout 1800 "${workspace_test[@]}" --no-run --quiet
step servers env RATECELL_REDIS_MODULE="$module" timeout 900 "${workspace_test[@]}" --quiet \
    --test server --test hostile --test redis_cell --test words --test redis_store --test redis_modes \
    --test cluster --test redis_cluster -- --ignored --test-threads 2

# One server for the clients, stopped on exit whatever happens.
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
dir="$(mktemp -d)"
redis_pid=""
stop_server() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    redis_pid=""
    rm -rf "$dir"
}
trap stop_server EXIT
start_server() {
    timeout 1800 redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
        --loadmodule "$module" >"$dir/log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 100); do
        redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && return 0
        sleep 0.1
    done
    cat "$dir/log" >&2
    return 1
}
step server start_server

# The Go and Rust nodes of the fleet of several languages
# (bindings/python/tests_redis/test_fleet_languages.py, run in the Python
# step): bindings/go/redis/cmd/fleetnode, and the client's example `fleet`
# (the test build's).
fleet_go="$target/redis-tests/fleetnode"
fleet_rust="$target/debug/examples/fleet"
fleet_nodes() {
    command -v "$go" >/dev/null 2>&1 || { echo "missing go" >&2; return 1; }
    timeout 1800 cargo build --release -p ratecell-capi --quiet || return 1
    local header_hash
    header_hash="$(sha256sum include/ratecell.h | cut -c1-16)"
    mkdir -p "$target/redis-tests"
    (cd bindings/go/redis &&
        CGO_ENABLED=1 CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}" \
            CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DRATECELL_HEADER_HASH=0x$header_hash" \
            GOFLAGS="${GOFLAGS:-} -mod=mod" \
            timeout 600 "$go" build -o "$fleet_go" ./cmd/fleetnode)
}
step fleet-nodes fleet_nodes

python_client() {
    local venv="$target/redis-tests/venv"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" || return 1
    timeout 900 "$venv/bin/pip" install -q "./bindings/python[redis,test]" || return 1
    # The HTTP middlewares' tests with Redis as the store run real servers.
    timeout 900 "$venv/bin/pip" install -q uvicorn starlette || return 1
    (cd "$dir" && RATECELL_REDIS_URL="redis://127.0.0.1:$port/0" RATECELL_REDIS_MODULE="$module" \
        RATECELL_FLEET_GO="$fleet_go" RATECELL_FLEET_RUST="$fleet_rust" \
        timeout 300 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
        "$root/bindings/python/tests_redis")
}
step python python_client

go_client() {
    command -v "$go" >/dev/null 2>&1 || { echo "missing go" >&2; return 1; }
    timeout 1800 cargo build --release -p ratecell-capi --quiet || return 1
    # As scripts/go-tests.sh: this build linked (-tags ratecell_dev) and
    # first on the core binding's link path, its header's hash in the
    # flags, and modules fetched as needed.
    local header_hash
    header_hash="$(sha256sum include/ratecell.h | cut -c1-16)"
    (cd bindings/go/redis &&
        export CGO_ENABLED=1 CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}" \
            CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -DRATECELL_HEADER_HASH=0x$header_hash" \
            GOFLAGS="${GOFLAGS:-} -mod=mod -tags=ratecell_dev" &&
        [ -z "$(gofmt -l .)" ] &&
        "$go" vet ./... &&
        RATECELL_REDIS_ADDR="127.0.0.1:$port" RATECELL_REDIS_MODULE="$module" \
            timeout 300 "$go" test -count=1 ./...)
}
step go go_client

# Memory per key against the floor of any module type, in one run (the
# table in bindings/redis/README.md comes from the same script at N=100000).
stop_server
# Last: the test build of the module again, with `floor` (only that crate
# is rebuilt), in place of the one the steps above loaded.
step floor-module timeout 1800 "${workspace_test[@]}" --features ratecell-redis/floor --no-run --quiet
step memory env N=20000 CHECK=1 FLOOR_MODULE="$module" timeout 600 scripts/redis-memory.sh

steps_summary
