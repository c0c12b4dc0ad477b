# Sourced by scripts/test.sh and scripts/redis-tests.sh.
#
# The features of the workspace's one test build (`cargo test --workspace`,
# debug): every optional part of the HTTP layer, so the build holds the
# Redis module, its Rust client and the layer's Redis stores beside the
# library. The rust step compiles and runs it; the redis step runs the
# server tests from the same build (the same packages and features, so
# cargo finds it fresh) rather than compiling the workspace again.
WORKSPACE_FEATURES="ratecell-tower/metrics,ratecell-tower/redis-modes"

# That build's cargo test, as a command ("${workspace_test[@]}" ARGS...), so
# every caller names the same packages and features (more --features add to
# them) and can still run it under timeout or env.
workspace_test=(cargo test --workspace --features "$WORKSPACE_FEATURES")

# The Redis module of that build: a test build leaves the cdylib in deps/.
# Needs $target, the cargo target directory, set before this file is read.
workspace_module="$target/debug/deps/libratecell_redis.so"

# system_packages: installs, as root (directly or through sudo) with
# apt-get, what the Redis module's build and tests need and the machine
# lacks: redis-server and redis-tools (redis-server, redis-cli) and
# libclang-dev (redis-module's bindgen step loads libclang.so or
# libclang-<version>.so at run time; any version will do, and libclang-cpp,
# which other packages bring, is a different library and does not).
system_packages() {
    local missing=()
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
    [ -n "${LIBCLANG_PATH:-}" ] || { ldconfig -p 2>/dev/null || /sbin/ldconfig -p; } |
        grep -qE '[[:space:]]libclang(-[0-9.]+)?\.so' || missing+=(libclang-dev)
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing ${missing[*]}"
    $sudo apt-get update -qq &&
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}
