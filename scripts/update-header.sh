#!/usr/bin/env bash
# Regenerates the committed C header include/ratecell.h from the C ABI's
# crate, crates/ratecell-capi/src/ (via cbindgen, run by its tests/header.rs
# with its cbindgen.toml), then checks it. Run after changing the C ABI.
set -euo pipefail
cd "$(dirname "$0")/.."
RATECELL_UPDATE_HEADER=1 cargo test --quiet -p ratecell-capi --test header committed_header_is_the_generated_one
cargo test --quiet -p ratecell-capi --test header
echo "include/ratecell.h is up to date"
