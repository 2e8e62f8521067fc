#!/usr/bin/env bash
# The size of what users install and what `memtrial kube` copies into every pod: the
# release binary (`cargo build --release`, the profile `cargo install` and
# docker/Dockerfile use), against the 20 MB target (issue 43). Exits 1 above the target,
# so a change that regrows it cannot pass unseen. Also says whether debug info and the
# symbol table are in it (the release profile strips both; `--profile profiling` keeps them).
#
#   benches/binary_size.sh             # builds the release binary if it is missing
#
# Environment: MEMTRIAL (target/release/memtrial), MAX_BYTES (20000000).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MEMTRIAL:-$ROOT/target/release/memtrial}
MAX=${MAX_BYTES:-20000000}
if [ ! -x "$BIN" ]; then
    (cd "$ROOT" && cargo build --release --locked)
fi
size=$(stat -c %s "$BIN")
debug=$(readelf -S -W "$BIN" | grep -c '\.debug_' || true)
symbols=$(readelf -S -W "$BIN" | grep -c '\.symtab' || true)
printf 'binary      %s\nsize        %d bytes (%.1f MB)\ntarget      <= %d bytes\n' "$BIN" "$size" \
    "$(awk "BEGIN{print $size/1e6}")" "$MAX"
printf 'debug info  %s sections\nsymbols     %s\n' "$debug" \
    "$([ "$symbols" -gt 0 ] && echo kept || echo stripped)"
if [ "$size" -gt "$MAX" ]; then
    echo "FAIL: $size bytes is above the $MAX-byte target" >&2
    exit 1
fi
echo PASS
