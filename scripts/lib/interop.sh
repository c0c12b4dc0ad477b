# What scripts/server-tests.sh and scripts/server-bench.sh share: the
# target directory (absolute, exported for cargo), the go command, and the
# envoyproxy/ratelimit version they run against. Sourced with $root set.

target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
export CARGO_TARGET_DIR="$target"
go="${GO:-go}"

# envoyproxy/ratelimit has no tagged release after v1.4.0; this pseudo
# version is the commit the interop tests were written against.
RATELIMIT_VERSION="v1.4.1-0.20260122083618-3fb702589d36"
