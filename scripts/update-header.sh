#!/usr/bin/env bash
# Regenerates the committed C header include/ratecell.h from src/ffi/ (via
# cbindgen, run by tests/header.rs with cbindgen.toml), then checks it. Run
# after changing the C ABI.
set -euo pipefail
cd "$(dirname "$0")/.."
RATECELL_UPDATE_HEADER=1 cargo test --quiet --test header committed_header_is_the_generated_one
cargo test --quiet --test header
echo "include/ratecell.h is up to date"
