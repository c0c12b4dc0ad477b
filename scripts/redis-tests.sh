#!/usr/bin/env bash
# Tests the Redis module (bindings/redis) and its clients on real servers:
#
#   1. installs what is missing, as root with apt-get: redis-server and
#      redis-tools (redis-server, redis-cli), libclang-dev (redis-module's
#      bindgen step);
#   2. cargo fmt --check, clippy -D warnings and the unit tests of
#      ratecell-redis; cargo build --release of the module;
#   3. the server tests (bindings/redis/tests/*.rs, run with --ignored):
#      each starts its own redis-server(s) on free 127.0.0.1 ports and stops
#      them when it ends, passing or not (AT traces equal to the in-process
#      Limiter, PTTL, a million keys' memory, RDB/AOF restarts, an RDB of
#      the first encoding, a replica promoted, a three-master cluster,
#      one-instant races, named errors, CL.THROTTLE against replies recorded
#      from redis-cell, hostile arguments in every position and hostile
#      stored states through RATECELL.RESTORE and RESTORE of DUMP payloads);
#      then memory per key against the floor of any module data type
#      (scripts/redis-memory.sh, which builds the module with `floor`);
#   4. the Rust client (crates/ratecell-redis-client): clippy -D warnings
#      and its tests in release, each of which starts its own servers with
#      the module and stops them when it ends (four processes sharing one
#      limit, command counts per mode, a server paused and one restarted);
#   5. the HTTP layer's Redis stores (crates/ratecell-tower, features
#      `redis`, `redis-modes` and `metrics`): clippy -D warnings, and their
#      tests, which start their own servers with the module (two layers
#      sharing one limit, a server paused with SIGSTOP and one killed,
#      answered by the failure policy within the store's timeout; each of
#      the client's modes refusing over the limit with the same fields,
#      cached_deny's remembered refusals sending no command);
#   6. the Python client (ratecell.redis, installed with the `redis` extra
#      into a venv under the target dir, plus uvicorn and starlette for the
#      HTTP middlewares' tests; its strict, cached_deny and leased modes,
#      and one limit shared by two Python, one Go and one Rust process,
#      whose Go and Rust nodes are built first) and the Go client
#      (bindings/go/redis: gofmt, go vet, go test) against one server this
#      script starts, with the module, and always stops; the store-timeout
#      tests start their own server from RATECELL_REDIS_MODULE, pause it
#      with SIGSTOP and always continue and kill it.
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
module="$target/release/libratecell_redis.so"

STEP_PREFIX="== redis"
SUMMARY_PREFIX="redis: "
. "$root/scripts/lib/steps.sh"

# install PACKAGE...: apt-get install, as root (directly or through sudo).
install() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
# bindgen loads libclang (libclang.so or libclang-<version>.so) at run time;
# any installed version will do. libclang-cpp, which other packages bring,
# is a different library and does not.
[ -n "${LIBCLANG_PATH:-}" ] || { ldconfig -p 2>/dev/null || /sbin/ldconfig -p; } | grep -qE '[[:space:]]libclang(-[0-9.]+)?\.so' ||
    missing+=(libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
    step install install "${missing[@]}"
fi

step fmt cargo fmt -p ratecell-redis -- --check
step clippy timeout 1800 cargo clippy -p ratecell-redis --all-targets --release --quiet -- -D warnings
# The benchmark-floor commands (scripts/redis-floor.sh) build only with
# this feature: lint them too, so they do not rot.
step clippy-floor timeout 1800 cargo clippy -p ratecell-redis --all-targets --release --features floor --quiet -- -D warnings
step build timeout 1800 cargo build -p ratecell-redis --release --quiet
step unit timeout 600 cargo test -p ratecell-redis --release --quiet --lib
step servers env RATECELL_REDIS_MODULE="$module" \
    timeout 900 cargo test -p ratecell-redis --release --quiet --tests -- --ignored --test-threads 2
# The Rust client (crates/ratecell-redis-client): its own servers, four
# processes sharing a limit, faults (SIGSTOP, a restart) and command counts.
step client-clippy timeout 1800 cargo clippy -p ratecell-redis-client --all-targets --release --quiet -- -D warnings
step client env RATECELL_REDIS_MODULE="$module" \
    timeout 900 cargo test -p ratecell-redis-client --release --quiet -- --test-threads 1
step tower-clippy timeout 1800 cargo clippy -p ratecell-tower --all-features --all-targets --release --quiet -- -D warnings
step tower env RATECELL_REDIS_MODULE="$module" \
    timeout 900 cargo test -p ratecell-tower --features redis-modes --release --quiet --test redis_store --test redis_modes -- --ignored --test-threads 2

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
# step): bindings/go/redis/cmd/fleetnode and the client's example `fleet`.
fleet_go="$target/redis-tests/fleetnode"
fleet_rust="$target/release/examples/fleet"
fleet_nodes() {
    command -v "$go" >/dev/null 2>&1 || { echo "missing go" >&2; return 1; }
    timeout 1800 cargo build --release -p ratecell-capi --quiet || return 1
    timeout 1800 cargo build --release -p ratecell-redis-client --example fleet --quiet || return 1
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
# Last: it rebuilds the module with the `floor` feature in place.
stop_server
step memory env N=20000 CHECK=1 timeout 600 scripts/redis-memory.sh

steps_summary
