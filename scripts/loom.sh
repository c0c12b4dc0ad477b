#!/usr/bin/env bash
# Model-checks the concurrent protocols under loom: every algorithm's cell
# update and the latch (tests/loom.rs), and the keyed table's insert, evict,
# update and reset races (tests/loom_table.rs), and several limits checked
# as one (tests/loom_multi.rs).
#
# Usage: scripts/loom.sh [extra cargo test args, e.g. a test name filter]
# LOOM_MAX_PREEMPTIONS defaults to 2 (override it in the environment). The
# loom build gets its own target directory, so switching between it and a
# normal build does not rebuild everything each time.
set -euo pipefail
cd "$(dirname "$0")/.."

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }--cfg loom"
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}"

exec cargo test --release --test loom --test loom_table --test loom_multi --test loom_latch --test loom_reconfigure "$@"
