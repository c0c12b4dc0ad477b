#!/usr/bin/env bash
# Model-checks the concurrent protocols under loom: every algorithm's cell
# update and the latch (tests/loom.rs), and the keyed table's insert, evict,
# update and reset races (tests/loom_table.rs; with several buckets,
# wrap-around, tombstones, batches and acquire in tests/loom_table_buckets.rs),
# several limits checked as one (tests/loom_multi.rs), the
# holder-recording latch (tests/loom_latch.rs), live reconfiguration
# (tests/loom_reconfigure.rs) and the statistics stripes (tests/loom_stats.rs);
# and, first, the models inside the library, of the leases' grant word
# and lock-free store (src/lease/cell.rs, src/lease/loom_model.rs: their
# types are the crate's own). Each model prints how many executions loom
# explored (see them with `-- --nocapture`).
#
# Usage: scripts/loom.sh [extra cargo test args, e.g. a test name filter,
# given to the models under tests/ only]
# LOOM_MAX_PREEMPTIONS defaults to 3 (override it in the environment). The
# loom build gets its own target directory, so switching between it and a
# normal build does not rebuild everything each time.
set -euo pipefail
cd "$(dirname "$0")/.."

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
# -A dead_code: under loom the snapshot module and the Builder terminals
# that reach it are compiled out (no model saves or restores), so what only
# they call is dead in this build alone; the library marks none of it (its
# one switch to loom is src/sync/), and clippy checks dead code in the
# normal build.
export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }--cfg ratecell_loom -A dead_code"
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}"

# Both commands name the package, so they resolve the same features and the
# second builds only the models under tests/.
cargo test -p ratecell --release --lib lease::
exec cargo test -p ratecell --release --test loom --test loom_table --test loom_table_buckets --test loom_multi --test loom_latch --test loom_reconfigure --test loom_stats --test loom_tiers "$@"
