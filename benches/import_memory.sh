#!/usr/bin/env bash
# What importing a large valid record costs in memory: a real record (`memtrial run --json`,
# two variants, two runs, /bin/true) grown to SAMPLES samples spread over its runs, written
# to a file, then `memtrial import` of it into a new database, its peak RSS (ru_maxrss, from
# GNU time) and wall time reported. Run it with MEMTRIAL set to builds before and after a
# change to compare them; the input stays below import's 64 MiB bound by default.
#
#   benches/import_memory.sh
#   SAMPLES=600000 MEMTRIAL=/tmp/memtrial-old benches/import_memory.sh
#
# Environment: SAMPLES (500000), MEMTRIAL (target/release/memtrial).
set -euo pipefail

SAMPLES=${SAMPLES:-500000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MEMTRIAL:-$ROOT/target/release/memtrial}

for t in python3 /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "import_memory: needs $t" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "import_memory: build first: cargo build --release" >&2; exit 1; }

DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
"$BIN" run --db src.db --json small.json --variants glibc,arena2 --runs 2 --seed 1 \
    --no-probes --quiet -- /bin/true >/dev/null
python3 - "$SAMPLES" <<'EOF'
import json, sys
n = int(sys.argv[1])
rec = json.load(open("small.json"))
runs = [r for v in rec["variants"] for r in v["runs"]]
per = n // len(runs)
for r in runs:
    r["samples"] = [
        {"t_seconds": i * 0.01, "rss_bytes": 1048576 + i, "vsz_bytes": 4194304 + i,
         "threads": 1, "pss_bytes": 1000000 + i, "uss_bytes": 900000 + i, "processes": 1}
        for i in range(per)
    ]
rec["experiment"]["hosts"][0]["hostname"] = "bench-host"
json.dump(rec, open("big.json", "w"))
EOF
SIZE=$(stat -c %s big.json)
/usr/bin/time -f "%M %e" -o time.txt "$BIN" import --db dst.db big.json >/dev/null
read -r KB SECS <time.txt
echo "import_memory: $SAMPLES samples, record $((SIZE / 1048576)) MiB: peak RSS $((KB / 1024)) MiB, ${SECS} s ($BIN)"
