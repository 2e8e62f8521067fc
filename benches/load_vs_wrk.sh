#!/usr/bin/env bash
# memtrial load versus wrk against one nginx on loopback, alternately, same threads and
# connections; then memtrial's own RSS over a run of 10 million requests.
#
#   benches/load_vs_wrk.sh                 # 5 alternations of 10 s, 1 thread, 64 connections
#   ROUNDS=7 DURATION=15 CONNS=128 benches/load_vs_wrk.sh
#
# Pinning: on a machine with 2+ CPUs nginx (worker_processes 1) runs on the last CPU and
# both clients on the CPUs before it (taskset), so the server never competes with the
# client for a core and each client gets the same CPUs. THREADS defaults to the number of
# client CPUs. Set PIN=0 to let the scheduler place everything.
# Environment: ROUNDS, DURATION (s), THREADS, CONNS, PORT, PIN, RSS_REQUESTS (10000000),
# SKIP_RSS=1 to skip the long run.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CONNS=${CONNS:-64}
PORT=${PORT:-18080}
PIN=${PIN:-1}
RSS_REQUESTS=${RSS_REQUESTS:-10000000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

need() {
    command -v "$1" >/dev/null 2>&1 && return
    [ -x "/usr/sbin/$1" ] && return
    echo "installing $2 (apt)…" >&2
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >/dev/null
    else
        sudo DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >/dev/null
    fi
}
need nginx nginx
need wrk wrk
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

(cd "$ROOT" && cargo build --release --quiet)
MEMTRIAL="$ROOT/target/release/memtrial"

NCPU=$(nproc)
if [ "$PIN" = 1 ] && [ "$NCPU" -ge 2 ]; then
    SERVER_CPUS=$((NCPU - 1))
    CLIENT_CPUS="0-$((NCPU - 2))"
    SERVER_PIN=(taskset -c "$SERVER_CPUS")
    CLIENT_PIN=(taskset -c "$CLIENT_CPUS")
    THREADS=${THREADS:-$((NCPU - 1))}
else
    SERVER_PIN=()
    CLIENT_PIN=()
    THREADS=${THREADS:-$NCPU}
    SERVER_CPUS=any
    CLIENT_CPUS=any
fi

WORK=$(mktemp -d)
NGINX_PID=
cleanup() {
    [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/html" "$WORK/logs"
# 612 bytes, the size of nginx's default index page.
head -c 459 /dev/urandom | base64 -w 0 | head -c 612 >"$WORK/html/index.html"
cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $WORK/logs/error.log warn;
pid $WORK/nginx.pid;
events { worker_connections 8192; }
http {
    access_log off;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    server {
        listen 127.0.0.1:$PORT reuseport;
        root $WORK/html;
    }
}
EOF
"${SERVER_PIN[@]}" "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/logs/out.log" 2>&1 &
NGINX_PID=$!
for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/index.html" 2>/dev/null && break
    sleep 0.1
done
URL="http://127.0.0.1:$PORT/index.html"

echo "nginx 1 worker on CPU $SERVER_CPUS; clients on CPU $CLIENT_CPUS; $THREADS thread(s), $CONNS connections, $DURATION s × $ROUNDS alternations"
echo "machine: $NCPU CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# wrk's latency percentile line ("50%  123.45us") in milliseconds.
wrk_ms() {
    awk -v p="$1" '$1 == p { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
        if (u == "us") v /= 1000; else if (u == "s") v *= 1000; else if (u == "m") v *= 60000; print v }'
}

printf '%-6s %14s %10s %14s %10s %8s\n' round wrk_rps wrk_p50 memtrial_rps mt_p50 ratio
: >"$WORK/rows"
for r in $(seq "$ROUNDS"); do
    # Alternate which tool goes first so drift hits both alike.
    for tool in $( [ $((r % 2)) = 1 ] && echo "wrk memtrial" || echo "memtrial wrk"); do
        if [ "$tool" = wrk ]; then
            "${CLIENT_PIN[@]}" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency "$URL" >"$WORK/wrk.txt"
            WRK_RPS=$(awk '/^Requests\/sec:/ { print $2 }' "$WORK/wrk.txt")
            WRK_P50=$(wrk_ms 50% <"$WORK/wrk.txt")
        else
            "${CLIENT_PIN[@]}" "$MEMTRIAL" -q load --url "$URL" -t "$THREADS" -c "$CONNS" \
                --duration "${DURATION}s" --json "$WORK/mt.json" >/dev/null
            MT_RPS=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['result']['throughput_rps'])" "$WORK/mt.json")
            MT_P50=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['result']['latency_p50_ms'])" "$WORK/mt.json")
        fi
    done
    RATIO=$(awk -v a="$MT_RPS" -v b="$WRK_RPS" 'BEGIN { printf "%.3f", a / b }')
    printf '%-6s %14.0f %9.3fms %14.0f %9.3fms %8s\n' "$r" "$WRK_RPS" "$WRK_P50" "$MT_RPS" "$MT_P50" "$RATIO"
    echo "$WRK_RPS $WRK_P50 $MT_RPS $MT_P50 $RATIO" >>"$WORK/rows"
done
python3 - "$WORK/rows" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
med = lambda i: statistics.median(r[i] for r in rows)
print(f"median  wrk {med(0):.0f} rps p50 {med(1):.3f} ms · memtrial {med(2):.0f} rps p50 {med(3):.3f} ms"
      f" · throughput ratio (memtrial/wrk) median {med(4):.3f}, min {min(r[4] for r in rows):.3f}, max {max(r[4] for r in rows):.3f}"
      f" over {len(rows)} alternations")
EOF

[ "${SKIP_RSS:-0}" = 1 ] && exit 0

# memtrial's own RSS over RSS_REQUESTS requests: run long enough at the measured pace.
MT_MED=$(awk '{ print $3 }' "$WORK/rows" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
SECS=$(awk -v n="$RSS_REQUESTS" -v r="$MT_MED" 'BEGIN { s = int(n / r * 1.3) + 1; print s }')
echo "RSS run: ~$RSS_REQUESTS requests, $SECS s"
"${CLIENT_PIN[@]}" "$MEMTRIAL" -q load --url "$URL" -t "$THREADS" -c "$CONNS" --duration "${SECS}s" \
    --json "$WORK/rss.json" >/dev/null &
MT_PID=$!
: >"$WORK/rss"
while kill -0 "$MT_PID" 2>/dev/null; do
    awk '/^VmRSS:/ { print $2 }' "/proc/$MT_PID/status" 2>/dev/null >>"$WORK/rss" || true
    sleep 1
done
wait "$MT_PID"
python3 - "$WORK/rss" "$WORK/rss.json" <<'EOF'
import json, sys
kb = [int(l) for l in open(sys.argv[1]) if l.strip()]
res = json.load(open(sys.argv[2]))["result"]
n = len(kb)
pick = lambda f: kb[min(n - 1, int(f * (n - 1)))]
print(f"memtrial RSS over {res['requests']:,} requests ({n} samples, 1/s): "
      f"at 5% {pick(0.05) / 1024:.1f} MiB, 50% {pick(0.5) / 1024:.1f} MiB, end {kb[-1] / 1024:.1f} MiB, "
      f"max {max(kb) / 1024:.1f} MiB; {res['throughput_rps']:.0f} rps, p50 {res['latency_p50_ms']:.3f} ms")
EOF
