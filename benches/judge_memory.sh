#!/usr/bin/env bash
# What `memtrial judge` costs in memory and time on a large answer: a stand-in for
# Prometheus on loopback (Python's http.server) answers every query of the memory metric
# with SERIES series of POINTS points each (a JSON answer of about SERIES × POINTS × 25
# bytes, the same for both groups), and everything else with an empty matrix. `memtrial
# judge` runs against it, its peak RSS (ru_maxrss, from GNU time) and wall time reported,
# and the answer's size beside them. With REF set to another build (such as main's), that
# build is measured the same way in the same run, and the ratios printed.
#
#   benches/judge_memory.sh
#   REF=/tmp/memtrial-main SERIES=5000 POINTS=900 benches/judge_memory.sh
#
# Environment: SERIES (5000), POINTS (900), MEMTRIAL (target/release/memtrial), REF (none).
set -euo pipefail

SERIES=${SERIES:-5000}
POINTS=${POINTS:-900}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MEMTRIAL:-$ROOT/target/release/memtrial}
REF=${REF:-}

for t in python3 /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "judge_memory: needs $t" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "judge_memory: build first: cargo build --release" >&2; exit 1; }

DIR=$(mktemp -d)
SERVER=
cleanup() {
    [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

# The window: POINTS points a minute apart, ending at UNTIL.
UNTIL=$(( $(date +%s) / 60 * 60 - 3600 ))
SINCE_MIN=$POINTS
cat >"$DIR/fake.py" <<'EOF'
import http.server, socketserver, sys, urllib.parse
series, points, until, port_file = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
start = until - points * 60
parts = []
for s in range(series):
    vals = ",".join('[%d,"%d"]' % (start + 60 * k, 100000000 + 1000 * ((s * 7 + k) % 997)) for k in range(points))
    parts.append('{"metric":{"__name__":"container_memory_working_set_bytes","namespace":"prod","pod":"web-%05d","container":"app"},"values":[%s]}' % (s, vals))
big = ('{"status":"success","data":{"resultType":"matrix","result":[' + ",".join(parts) + ']}}').encode()
empty = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
sys.stderr.write("answer: %d bytes\n" % len(big))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("query", [""])[0]
        body = big if q.startswith("container_memory_working_set_bytes{") else empty
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
srv = S(("127.0.0.1", 0), H)
open(port_file, "w").write(str(srv.server_address[1]))
srv.serve_forever()
EOF
python3 "$DIR/fake.py" "$SERIES" "$POINTS" "$UNTIL" "$DIR/port" 2>"$DIR/fake.log" &
SERVER=$!
for _ in $(seq 1 600); do [ -s "$DIR/port" ] && break; sleep 0.1; done
[ -s "$DIR/port" ] || { echo "judge_memory: the stand-in did not start" >&2; cat "$DIR/fake.log" >&2; exit 1; }
PORT=$(cat "$DIR/port")
SIZE=$(sed -n 's/answer: \([0-9]*\) bytes/\1/p' "$DIR/fake.log")

measure() {
    local bin=$1
    /usr/bin/time -f "%M %e" -o "$DIR/time.txt" "$bin" judge --prometheus "http://127.0.0.1:$PORT" \
        --baseline 'app="base"' --variant 'var=app="var"' \
        --until "$(date -u -d "@$UNTIL" +%Y-%m-%dT%H:%M:%SZ)" --since "${SINCE_MIN}m" \
        --json "$DIR/judgement.json" >/dev/null 2>"$DIR/judge.err" \
        || { echo "judge_memory: $bin failed:" >&2; cat "$DIR/judge.err" >&2; exit 1; }
    read -r KB SECS <"$DIR/time.txt"
    echo "$KB $SECS"
}

read -r KB SECS < <(measure "$BIN")
echo "judge_memory: $SERIES series x $POINTS points, answer $((SIZE / 1048576)) MiB: peak RSS $((KB / 1024)) MiB, ${SECS} s ($BIN)"
if [ -n "$REF" ]; then
    read -r RKB RSECS < <(measure "$REF")
    echo "judge_memory: reference: peak RSS $((RKB / 1024)) MiB, ${RSECS} s ($REF)"
    awk -v a="$KB" -v b="$RKB" -v s="$SECS" -v r="$RSECS" \
        'BEGIN { printf "judge_memory: this build / reference: peak RSS %.2f, wall %.2f\n", a / b, s / r }'
fi
