#!/usr/bin/env bash
# A long soak of two variants of the cache-server fixture (`memtrial workload cache-server`)
# under a replayed access log, measuring memtrial itself: its RSS over the soak (sampled
# every 30 s from /proc), its CPU time, the database's size, and what the soak found.
#
#   benches/soak.sh                        # 1 hour, glibc against arena2, windows of 5 min
#   DURATION=10m WINDOW=1m benches/soak.sh
#
# Environment: DURATION (1h), WINDOW (5m), VARIANTS (glibc,arena2), RATE (log lines per
# second of the synthetic log, 300), SPEED (1), MT (a memtrial binary to use instead of
# building one), OUT (a directory to keep; default a
# temporary one). Root (each instance gets a cgroup). Loopback only; it stops by itself.
set -euo pipefail

DURATION=${DURATION:-1h}
WINDOW=${WINDOW:-5m}
VARIANTS=${VARIANTS:-glibc,arena2}
RATE=${RATE:-300}
SPEED=${SPEED:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
cd "$OUT"

if [ -z "${MT:-}" ]; then
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
    MT="$ROOT/target/release/memtrial"
fi

# A minute of log in the combined format, RATE requests a second over 5000 paths; the
# replay starts it over when it runs out.
python3 - "$RATE" > access.log <<'EOF'
import random, sys
rate = int(sys.argv[1])
r = random.Random(7)
for s in range(60):
    t = "26/Nov/2026:10:%02d:%02d +0000" % (s // 60, s % 60)
    for _ in range(rate):
        print('127.0.0.1 - - [%s] "GET /items/%d HTTP/1.1" 200 512 "-" "bench"' % (t, r.randrange(5000)))
EOF

"$MT" --db soak.db soak --variants "$VARIANTS" --replay access.log --speed "$SPEED" \
    --url 'http://127.0.0.1:{port}/' --duration "$DURATION" --window "$WINDOW" \
    --json soak.json --html soak.html -- "$MT" workload cache-server --port '{port}' \
    > table.txt 2> progress.txt &
pid=$!
tick=$(getconf CLK_TCK)
: > own.tsv
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    cpu=$(awk -v t="$tick" '{print ($14 + $15) / t}' "/proc/$pid/stat" 2>/dev/null || true)
    [ -n "$rss" ] && printf '%s\t%s\t%s\n' "$(( $(date +%s) - start ))" "$rss" "$cpu" >> own.tsv
    sleep 30
done
wait "$pid" || true

echo "== memtrial's own RSS (KiB) and CPU (s), every 30 s: $OUT/own.tsv"
python3 - own.tsv "$DURATION" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
rows = [(int(a), int(b), float(c)) for a, b, c in rows]
late = [r for r in rows if r[0] >= 300] or rows
rss = [r[1] for r in late]
mid = sorted(rss)[len(rss) // 2]
print("samples after the first 5 min: %d; RSS min %d KiB, median %d KiB, max %d KiB: %+.1f%% / %+.1f%% of the median"
      % (len(rss), min(rss), mid, max(rss), 100.0 * (min(rss) - mid) / mid, 100.0 * (max(rss) - mid) / mid))
secs = rows[-1][0] or 1
print("CPU: %.1f s over %d s = %.1f s per hour (%.2f%% of one core)" % (rows[-1][2], secs, rows[-1][2] * 3600 / secs, 100 * rows[-1][2] / secs))
EOF
echo "== database: $(du -h soak.db | cut -f1) ($(stat -c %s soak.db) bytes)"
echo "== the soak's table"
cat table.txt
