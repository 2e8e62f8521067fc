#!/usr/bin/env bash
# What a scrape of `memtrial exporter` costs: PROCS processes (benches/threads_hold.c:
# THREADS threads holding KIB KiB each, glibc malloc), the exporter matching them, then
# SCRAPES scrapes with curl. Reports the scrape latency (the cold first scrape, when every
# costly figure is read, and the rest) and the exporter's CPU time per scrape from
# /proc/PID/stat (utime + stime), in two settings: the default cache (--max-age 30s) and
# no cache (--max-age 0s: every scrape re-reads within --budget). Stops everything.
#
#   benches/exporter_scrape.sh
#   PROCS=300 SCRAPES=100 BUDGET=500ms benches/exporter_scrape.sh
#
# Environment: PROCS (100), THREADS (4), KIB (2048), SCRAPES (50), PAUSE between scrapes
# in seconds (0.2), BUDGET (200ms), PORT (19464), MEMTRIAL (target/release/memtrial).
set -euo pipefail

PROCS=${PROCS:-100}
THREADS=${THREADS:-4}
KIB=${KIB:-2048}
SCRAPES=${SCRAPES:-50}
PAUSE=${PAUSE:-0.2}
BUDGET=${BUDGET:-200ms}
PORT=${PORT:-19464}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MEMTRIAL:-$ROOT/target/release/memtrial}

for t in gcc curl awk; do
    command -v "$t" >/dev/null || { echo "exporter_scrape: needs $t" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "exporter_scrape: build first: cargo build --release" >&2; exit 1; }

work=$(mktemp -d)
pids=()
exporter=
cleanup() {
    [ -n "$exporter" ] && kill "$exporter" 2>/dev/null && wait "$exporter" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# A name of its own: the group is exactly these processes.
name=mtbench$$
gcc -O2 -pthread -o "$work/$name" "$ROOT/benches/threads_hold.c"
for _ in $(seq "$PROCS"); do
    "$work/$name" "$THREADS" 3600 "$KIB" 2>/dev/null &
    pids+=($!)
done
# Every process holds its memory once it has all its threads.
for p in "${pids[@]}"; do
    until [ "$(awk '/^Threads:/ {print $2}' "/proc/$p/status" 2>/dev/null)" = $((THREADS + 1)) ]; do
        sleep 0.05
    done
done
sleep 0.5
tick=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# One setting: start the exporter, scrape, print the figures, stop it.
measure() {
    local label=$1 max_age=$2
    "$BIN" exporter --listen "127.0.0.1:$PORT" --match "^$name\$" \
        --budget "$BUDGET" --max-age "$max_age" 2>/dev/null &
    exporter=$!
    until curl -s -o /dev/null "http://127.0.0.1:$PORT/"; do
        kill -0 "$exporter" 2>/dev/null || { echo "exporter_scrape: the exporter exited (port $PORT in use? set PORT)" >&2; exit 1; }
        sleep 0.05
    done
    kill -0 "$exporter" 2>/dev/null || { echo "exporter_scrape: port $PORT is another program's; set PORT" >&2; exit 1; }
    local c0 c1 first
    c0=$(cpu_ticks "$exporter")
    first=$(curl -s -o "$work/cold" -w '%{time_total}' "http://127.0.0.1:$PORT/metrics")
    c1=$(cpu_ticks "$exporter")
    local cold_cpu=$(( (c1 - c0) * 1000 / tick ))
    : >"$work/lat"
    c0=$(cpu_ticks "$exporter")
    for _ in $(seq "$SCRAPES"); do
        curl -s -o "$work/last" -w '%{time_total}\n' "http://127.0.0.1:$PORT/metrics" >>"$work/lat"
        sleep "$PAUSE"
    done
    c1=$(cpu_ticks "$exporter")
    local rss
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$exporter/status")
    kill "$exporter"; wait "$exporter" 2>/dev/null || true
    exporter=
    local procs reads
    procs=$(awk -v g="memtrial_group_processes{group=\"$name\"}" '$1 == g {print $2}' "$work/last")
    reads=$(grep '^memtrial_exporter_costly_reads_total' "$work/last" | sed 's/memtrial_exporter_costly_reads_total//' | tr '\n' ' ')
    sort -g "$work/lat" | awk -v label="$label" -v first="$first" -v cold_cpu="$cold_cpu" \
        -v cpu_ms=$(( (c1 - c0) * 1000 / tick )) -v n="$SCRAPES" -v procs="$procs" \
        -v rss="$rss" -v reads="$reads" '
        { v[NR] = $1 * 1000 }
        END {
            printf "%s: %s processes matched\n", label, procs
            printf "  cold first scrape: %.1f ms, exporter CPU %d ms\n", first * 1000, cold_cpu
            printf "  next %d scrapes: median %.1f ms, p90 %.1f ms, max %.1f ms; exporter CPU %.1f ms per scrape\n",
                n, v[int((NR + 1) / 2)], v[int(NR * 0.9 + 0.5)], v[NR], cpu_ms / n
            printf "  costly reads %s; exporter RSS %d KiB\n", reads, rss
        }'
}

echo "exporter_scrape: $PROCS processes x $THREADS threads x $KIB KiB, $SCRAPES scrapes every ${PAUSE}s, budget $BUDGET, $(nproc) CPUs"
measure "cached (--max-age 30s)" 30s
measure "uncached (--max-age 0s)" 0s
