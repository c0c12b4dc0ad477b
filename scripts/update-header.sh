#!/usr/bin/env bash
# Regenerates the committed C header include/ratecell.h from the C ABI's
# crate, crates/ratecell-capi/src/ (via cbindgen, run by its tests/header.rs
# with its cbindgen.toml), then checks it. Run after changing the C ABI.
# When the header changed, the Go binding's prebuilt library is stale too
# (scripts/go-tests.sh fails until it is rebuilt): says so.
set -euo pipefail
cd "$(dirname "$0")/.."
before="$(sha256sum include/ratecell.h)"
RATECELL_UPDATE_HEADER=1 cargo test --quiet -p ratecell-capi --test header committed_header_is_the_generated_one
cargo test --quiet -p ratecell-capi --test header
echo "include/ratecell.h is up to date"
if [ "$(sha256sum include/ratecell.h)" != "$before" ]; then
    echo "include/ratecell.h changed: run scripts/go-prebuilt.sh and commit bindings/go/lib/linux_amd64 (the Go binding's prebuilt library)"
fi
