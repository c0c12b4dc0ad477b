#!/usr/bin/env bash
# Tests ratecell-server against envoyproxy/ratelimit and real proxies
# (crates/ratecell-server/interop, a Go module of its own):
#
#   1. installs what is missing: redis-server and redis-tools (with the
#      Redis module's other build needs, scripts/lib/workspace.sh) and
#      nginx (Debian's nginx-light: auth_request is built in);
#   2. envoyproxy/ratelimit's service and client (service_cmd, client_cmd)
#      at the pinned version, from the Go module proxy, into
#      $target/interop/bin (go install is a no-op when they are current);
#   3. ratecell-server and the Redis module, debug (cargo build -p
#      ratecell-server -p ratecell-redis);
#   4. gofmt -l and go vet ./... in the interop module;
#   5. go test ./... there: the conformance tests (each against the
#      incumbent on Redis, and ratecell-server in memory and on Redis,
#      strict), the differential run, nginx auth_request in front of the
#      forward-auth endpoint, two leased replicas on one Redis. Every server
#      a test starts listens on 127.0.0.1 only and is stopped when it ends.
#
# INTEROP_SERVERS (default incumbent,memory,strict) narrows the servers the
# conformance and differential tests run against; GO_TEST_FLAGS adds flags
# to go test (-run, -v). Honours CARGO_TARGET_DIR and GO. Every step is
# bounded by `timeout`. Prints each step and "server: N passed, M failed";
# exits non-zero on any failure.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
. "$root/scripts/lib/interop.sh"

STEP_PREFIX="== server"
SUMMARY_PREFIX="server: "
. "$root/scripts/lib/steps.sh"
. "$root/scripts/lib/workspace.sh"

command -v "$go" >/dev/null 2>&1 || {
    echo "missing go: install Go 1.26 or later (https://go.dev/dl/)" >&2
    echo "${SUMMARY_PREFIX}0 passed, 1 failed"
    exit 1
}

nginx_bin="${NGINX_BIN:-}"
find_nginx() {
    [ -n "$nginx_bin" ] && return 0
    nginx_bin="$(command -v nginx 2>/dev/null || true)"
    [ -z "$nginx_bin" ] && [ -x /usr/sbin/nginx ] && nginx_bin=/usr/sbin/nginx
    [ -n "$nginx_bin" ]
}
# nginx-light is Debian's smallest nginx with auth_request; the package
# starts a system nginx on port 80 where the machine runs services, which
# the tests do not use: they start their own, on free ports.
install_nginx() {
    find_nginx && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing nginx-light"
    $sudo apt-get update -qq &&
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light &&
        find_nginx
}
packages() {
    system_packages && install_nginx
}

bin="$target/interop/bin"
peers() {
    mkdir -p "$bin" &&
        GOBIN="$bin" timeout 900 "$go" install \
            "github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION" \
            "github.com/envoyproxy/ratelimit/src/client_cmd@$RATELIMIT_VERSION"
}

module_dir="crates/ratecell-server/interop"
gofmt_clean() {
    local unformatted
    unformatted="$(cd "$module_dir" && gofmt -l .)"
    [ -z "$unformatted" ] || { echo "gofmt -l: $unformatted" >&2; return 1; }
}
go_test() {
    cd "$module_dir" &&
        env RATELIMIT_SERVICE_BIN="$bin/service_cmd" RATELIMIT_CLIENT_BIN="$bin/client_cmd" \
            RATECELL_SERVER_BIN="$target/debug/ratecell-server" \
            RATECELL_REDIS_MODULE="$target/debug/libratecell_redis.so" \
            NGINX_BIN="$nginx_bin" \
            timeout 1200 "$go" test -count=1 -timeout 900s ${GO_TEST_FLAGS:-} ./...
    local rc=$?
    cd "$root"
    return $rc
}

step packages packages
step peers peers
step build timeout 1800 cargo build -p ratecell-server -p ratecell-redis --quiet
step gofmt gofmt_clean
step vet bash -c "cd '$module_dir' && timeout 600 '$go' vet ./..."
step test go_test

steps_summary
