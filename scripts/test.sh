#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh) and runs the whole test suite: first every test in
# parallel, then the measurement-sensitive tests marked #[ignore] one at a time, alone on
# the machine (the demo's claim that glibc has the largest footprint is about a quiet
# 2-core machine, not one shared with twenty other tests).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo test --release --locked
cargo test --release --locked --test it -- --ignored --test-threads=1
