#!/usr/bin/env bash
# What importing a record costs in memory: a real record (`memtrial run --json`, two
# variants, two runs, /bin/true) imported as it is (a few tens of KiB), and grown to
# SAMPLES samples spread over its runs; each `memtrial import`ed into a new database, its
# peak RSS (ru_maxrss, from GNU time) and wall time reported beside the record's size.
# With REF set to another build (such as main's), that build imports the same files in the
# same run and the ratios are printed. The big input stays below import's 64 MiB bound by
# default.
#
#   benches/import_memory.sh
#   SAMPLES=600000 REF=/tmp/memtrial-main benches/import_memory.sh
#
# Environment: SAMPLES (500000), MEMTRIAL (target/release/memtrial), REF (none).
set -euo pipefail

SAMPLES=${SAMPLES:-500000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MEMTRIAL:-$ROOT/target/release/memtrial}
REF=${REF:-}

for t in python3 /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "import_memory: needs $t" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "import_memory: build first: cargo build --release" >&2; exit 1; }

DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
"$BIN" run --db src.db --json small.json --variants glibc,arena2 --runs 2 --seed 1 \
    --no-probes --quiet -- /bin/true >/dev/null
python3 "$ROOT/benches/grow_record.py" small.json "$SAMPLES" big.json

# Peak RSS in KiB and wall seconds of `BIN import` of FILE into a new database.
measure() {
    local bin=$1 file=$2
    rm -f dst.db
    /usr/bin/time -f "%M %e" -o time.txt "$bin" import --db dst.db "$file" >/dev/null
    cat time.txt
}

for f in small.json big.json; do
    SIZE=$(stat -c %s "$f")
    read -r KB SECS < <(measure "$BIN" "$f")
    echo "import_memory: $f, $((SIZE / 1024)) KiB: peak RSS $((KB / 1024)) MiB, ${SECS} s ($BIN)"
    if [ -n "$REF" ]; then
        read -r RKB RSECS < <(measure "$REF" "$f")
        echo "import_memory: $f: reference: peak RSS $((RKB / 1024)) MiB, ${RSECS} s ($REF)"
        awk -v a="$KB" -v b="$RKB" -v s="$SECS" -v r="$RSECS" -v f="$f" \
            'BEGIN { printf "import_memory: %s: this build / reference: peak RSS %.2f, wall %.2f\n", f, a / b, s / r }'
    fi
done
