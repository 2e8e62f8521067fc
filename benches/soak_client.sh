#!/usr/bin/env bash
# The soak's fan-out client: memtrial's own CPU per request during `memtrial soak`, against
# wrk's (closed loop) and `memtrial load --rate` (open loop) on one cache-server instance.
#
#   benches/soak_client.sh                 # 2 instances × 1000 req/s for 2 min, then 60 s each
#   RATE=500 DURATION=5m LOAD_SECONDS=30 benches/soak_client.sh
#
# 1. soak: two identical instances of `memtrial workload cache-server` (glibc and `twin`, the
#    same with MEMTRIAL_TWIN=1, which the server ignores), RATE req/s each, CONNS connections
#    and one load thread per instance, window WINDOW. memtrial's own CPU is utime+stime of its
#    process (/proc/PID/stat fields 14 and 15, all of its threads, not its children) polled
#    every 0.2 s; the last sample before it exits is taken. Not /usr/bin/time: that adds the
#    reaped children, i.e. the servers. Divided by the requests completed (the JSON's
#    `requests`, summed over the instances). This CPU is not only the load generators:
#    memtrial also samples each instance's memory every second (/proc and the cgroup; cheap)
#    and writes windows to SQLite. The per-thread split (memtrial-load-* are the generators,
#    the main thread samples and writes) is printed from the last /proc/PID/task snapshot.
# 2. wrk -t1 -cCONNS -dLOAD_SECONDS against one cache-server started here; CPU from
#    /usr/bin/time (%U+%S), divided by wrk's request count. wrk is a closed loop: it cannot
#    pace, so it runs as fast as the server answers (far above RATE); the comparison is per
#    request, and a closed loop batches more work per wake-up than a paced one.
# 3. memtrial load --rate RATE --connections CONNS --threads 1 for LOAD_SECONDS against the
#    same server: the open loop like for like with one soak instance, CPU from /usr/bin/time.
# The target (the issue's): the soak's CPU per request no more than wrk's at the same rate
# and connections.
#
# Environment: RATE (1000 per instance), DURATION (2m), WINDOW (30s), CONNS (16),
# LOAD_SECONDS (60), PORT (18190, for steps 2 and 3), MT (a memtrial binary to use instead
# of building one), OUT (a directory to keep; default a temporary one). Root (each soak
# instance gets a cgroup). Loopback only; every step is bounded in time and stops by itself.
set -euo pipefail

RATE=${RATE:-1000}
DURATION=${DURATION:-2m}
WINDOW=${WINDOW:-30s}
CONNS=${CONNS:-16}
LOAD_SECONDS=${LOAD_SECONDS:-60}
PORT=${PORT:-18190}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
cd "$OUT"

need() {
    command -v "$1" >/dev/null 2>&1 && return
    [ -x "/usr/bin/$1" ] && return
    echo "installing $2 (apt)…" >&2
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >/dev/null
    else
        sudo DEBIAN_FRONTEND=noninteractive apt-get install -y "$2" >/dev/null
    fi
}
need wrk wrk
[ -x /usr/bin/time ] || need /usr/bin/time time
need python3 python3

if [ -z "${MT:-}" ]; then
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
    MT="$ROOT/target/release/memtrial"
fi
TICK=$(getconf CLK_TCK)

SERVER_PID=
SOAK_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    [ -n "$SOAK_PID" ] && kill -INT "$SOAK_PID" 2>/dev/null || true
}
trap cleanup EXIT

# utime+stime of a process in clock ticks (field 14 and 15 of /proc/PID/stat; the fields
# after the command name's closing parenthesis start at field 3).
ticks_of() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    # shellcheck disable=SC2086
    set -- $s
    echo $((${12} + ${13}))
}
# "thread-name ticks" for every thread of a process.
threads_of() {
    local t s n
    for t in /proc/"$1"/task/*; do
        s=$(cat "$t/stat" 2>/dev/null) || continue
        n=$(cat "$t/comm" 2>/dev/null) || continue
        s=${s##*) }
        # shellcheck disable=SC2086
        set -- $s
        echo "$n $((${12} + ${13}))"
    done
}

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "== 1. soak: glibc + twin, $RATE req/s each, $CONNS connections each, $DURATION, window $WINDOW"
"$MT" --db soak.db soak --variants glibc --variant 'twin=MEMTRIAL_TWIN=1' \
    --url 'http://127.0.0.1:{port}/' --rate "$RATE" --connections "$CONNS" \
    --duration "$DURATION" --window "$WINDOW" --json soak.json \
    -- "$MT" workload cache-server --port '{port}' >table.txt 2>progress.txt &
SOAK_PID=$!
last=0
n=0
while t=$(ticks_of "$SOAK_PID"); do
    last=$t
    # The thread split every second (1 in 5 polls) to keep the poller itself light.
    if [ $((n % 5)) = 0 ]; then threads_of "$SOAK_PID" >threads.tmp && mv threads.tmp threads.txt; fi
    n=$((n + 1))
    sleep 0.2
done
rc=0
wait "$SOAK_PID" || rc=$?
SOAK_PID=
[ "$rc" = 0 ] || { echo "soak exited $rc; see $OUT/progress.txt" >&2; tail -5 progress.txt >&2; exit 1; }
echo "$last" >soak_ticks

echo "== 2. wrk -t1 -c$CONNS -d${LOAD_SECONDS}s against one cache-server (closed loop)"
"$MT" workload cache-server --port "$PORT" >server.log 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null && break
    sleep 0.1
done
/usr/bin/time -f '%U %S' -o wrk.time wrk -t1 -c"$CONNS" -d"${LOAD_SECONDS}s" "http://127.0.0.1:$PORT/" >wrk.txt
cat wrk.txt

echo "== 3. memtrial load --rate $RATE --connections $CONNS --threads 1 --duration ${LOAD_SECONDS}s (open loop)"
/usr/bin/time -f '%U %S' -o load.time "$MT" -q --db load.db load --url "http://127.0.0.1:$PORT/" \
    --rate "$RATE" --connections "$CONNS" --threads 1 --duration "${LOAD_SECONDS}s" --json load.json >/dev/null
kill "$SERVER_PID" 2>/dev/null || true
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=

echo "== figures ($OUT)"
python3 - "$TICK" "$RATE" "$CONNS" <<'EOF'
import json, re, sys
from collections import defaultdict
tick, rate, conns = float(sys.argv[1]), sys.argv[2], sys.argv[3]
s = json.load(open("soak.json"))
req = sum(v["requests"] for v in s["variants"])
due = sum(v["due"] or 0 for v in s["variants"])
err = sum(v["errors"] for v in s["variants"])
cpu = int(open("soak_ticks").read()) / tick
split = defaultdict(float)
for line in open("threads.txt"):
    name, t = line.rsplit(None, 1)
    name = "load generators (memtrial-load-*)" if name.startswith("memtrial-load") else \
        "main thread (sampling, SQLite)" if name == "memtrial" else "other threads"
    split[name] += int(t) / tick
per = {v["name"]: v["requests"] for v in s["variants"]}
print(f"soak      {len(s['variants'])} instances, {req:,} requests completed of {due:,} due, {err} errors "
      f"({', '.join(f'{k} {n:,}' for k, n in per.items())}); memtrial CPU {cpu:.2f} s")
print("          split at the last snapshot (≤1 s before the end): "
      + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(split.items(), key=lambda kv: -kv[1])))
soak_us = cpu / req * 1e6
load_us = split["load generators (memtrial-load-*)"] / req * 1e6

w = open("wrk.txt").read()
m = re.search(r"(\d+) requests in", w)
wrk_req = int(m.group(1))
wrk_rps = float(re.search(r"Requests/sec:\s+([\d.]+)", w).group(1))
u, sy = map(float, open("wrk.time").read().split()[-2:])
wrk_cpu = u + sy
wrk_us = wrk_cpu / wrk_req * 1e6

l = json.load(open("load.json"))["result"]
lu, ls = map(float, open("load.time").read().split()[-2:])
load_req = l["requests"]
lo_us = (lu + ls) / load_req * 1e6
print(f"wrk       {wrk_req:,} requests ({wrk_rps:,.0f} req/s, closed loop, cannot pace), CPU {wrk_cpu:.2f} s (user {u:.2f} + sys {sy:.2f})")
print(f"load      {load_req:,} requests ({l.get('throughput_rps', 0):,.0f} req/s, open loop at {rate}), CPU {lu + ls:.2f} s (user {lu:.2f} + sys {ls:.2f})")
print()
print(f"CPU per request, µs ({conns} connections, 1 load thread per target):")
rows = [("soak fan-out, memtrial's whole process", soak_us),
        ("soak fan-out, its load threads only", load_us),
        (f"memtrial load --rate {rate} (open loop)", lo_us),
        (f"wrk (closed loop, {wrk_rps:,.0f} req/s)", wrk_us)]
for name, us in rows:
    print(f"  {name:<44} {us:8.1f}")
print(f"target: soak ≤ wrk per request: {'met' if soak_us <= wrk_us else 'NOT met'} "
      f"(soak/wrk = {soak_us / wrk_us:.2f}; open-loop load/wrk = {lo_us / wrk_us:.2f})")
EOF
