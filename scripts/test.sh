#!/usr/bin/env bash
# Sets up everything the tests need (scripts/setup-tests.sh, which runs scripts/setup.sh) and
# runs the whole test suite: first every test in parallel, then the measurement-sensitive
# tests marked #[ignore] one at a time, alone on the machine (the demo's claim that glibc has
# the largest footprint is about a quiet 2-core machine, not one shared with twenty other
# tests). MEMTRIAL_TEST_STRICT=1: a test whose package or capability is missing fails
# instead of skipping, so the suite cannot pass by skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-tests.sh
export MEMTRIAL_TEST_STRICT=1
cargo test --release --locked
cargo test --release --locked --test it -- --ignored --test-threads=1
