#!/usr/bin/env bash
# What a scrape of `memtrial exporter` costs, side by side with Debian's
# `prometheus-process-exporter` (`-gather-smaps=true`: PSS, as memtrial reads) on the
# same processes: PROCS processes (benches/threads_hold.c: THREADS threads holding KIB
# KiB each, glibc malloc), each exporter matching exactly them, then SCRAPES scrapes
# with curl, PAUSE apart. Reports the scrape latency (the cold first scrape, when every
# costly figure is read, and the rest: median, p90, max) and each exporter's CPU time
# per scrape from /proc/PID/stat (utime + stime: its own work and the kernel's, such as
# the page-table walk behind smaps_rollup), in three settings: memtrial with the default
# cache (--max-age 30s), memtrial with no cache (--max-age 0s: every scrape re-reads
# every figure within --budget), and process-exporter (which re-reads everything every
# scrape). Then the ratios of process-exporter's figures to memtrial's uncached ones.
# First the kernel floor: what reading smaps_rollup (and the other files memtrial reads
# per process) of these processes costs by itself, read by a minimal C loop.
# Stops both exporters and the processes at exit.
#
#   benches/exporter_scrape.sh
#   PROCS=300 SCRAPES=100 BUDGET=500ms benches/exporter_scrape.sh
#   PE_FLAGS=-threads=false benches/exporter_scrape.sh   # without its per-thread metrics
#
# Environment: PROCS (100), THREADS (4), KIB (2048), SCRAPES (50), PAUSE between scrapes
# in seconds (0.2), BUDGET (200ms), PORT (19464; process-exporter on PORT + 1),
# MEMTRIAL (target/release/memtrial), PE (prometheus-process-exporter; installed with
# apt-get when missing and root), PE_FLAGS (extra flags for it, none by default).
set -euo pipefail

PROCS=${PROCS:-100}
THREADS=${THREADS:-4}
KIB=${KIB:-2048}
SCRAPES=${SCRAPES:-50}
PAUSE=${PAUSE:-0.2}
BUDGET=${BUDGET:-200ms}
PORT=${PORT:-19464}
PE_PORT=$((PORT + 1))
PE_FLAGS=${PE_FLAGS:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MEMTRIAL:-$ROOT/target/release/memtrial}
PE=${PE:-prometheus-process-exporter}

for t in gcc curl awk; do
    command -v "$t" >/dev/null || { echo "exporter_scrape: needs $t" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "exporter_scrape: build first: cargo build --release" >&2; exit 1; }
if ! command -v "$PE" >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "exporter_scrape: installing prometheus-process-exporter" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus-process-exporter >/dev/null
        # The package enables a service on port 9256; on a machine with systemd it starts.
        # It exports other processes and is not measured here.
    fi
    command -v "$PE" >/dev/null || { echo "exporter_scrape: needs $PE (apt-get install prometheus-process-exporter), or set PE" >&2; exit 1; }
fi

work=$(mktemp -d)
pids=()
exporter=
cleanup() {
    if [ -n "$exporter" ]; then
        kill "$exporter" 2>/dev/null || true
        wait "$exporter" 2>/dev/null || true
    fi
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

# Waits until the exporter just started ($exporter) answers on port $1.
await() {
    local port=$1
    until curl -s -o /dev/null "http://127.0.0.1:$port/metrics"; do
        kill -0 "$exporter" 2>/dev/null || { echo "exporter_scrape: the exporter exited (port $port in use? set PORT)" >&2; exit 1; }
        sleep 0.05
    done
    kill -0 "$exporter" 2>/dev/null || { echo "exporter_scrape: port $port is another program's; set PORT" >&2; exit 1; }
}

# Scrapes the exporter $exporter on port $1 once cold, then $SCRAPES times, and stops it.
# Leaves the scrapes' latencies in $work/lat, the last body in $work/last, and sets
# first (s), cold_cpu (ms), cpu_ms (ms over the $SCRAPES scrapes) and rss (KiB).
scrape() {
    local port=$1 c0 c1
    c0=$(cpu_ticks "$exporter")
    first=$(curl -s -o "$work/cold" -w '%{time_total}' "http://127.0.0.1:$port/metrics")
    c1=$(cpu_ticks "$exporter")
    cold_cpu=$(( (c1 - c0) * 1000 / tick ))
    : >"$work/lat"
    c0=$(cpu_ticks "$exporter")
    for _ in $(seq "$SCRAPES"); do
        curl -s -o "$work/last" -w '%{time_total}\n' "http://127.0.0.1:$port/metrics" >>"$work/lat"
        sleep "$PAUSE"
    done
    c1=$(cpu_ticks "$exporter")
    cpu_ms=$(( (c1 - c0) * 1000 / tick ))
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$exporter/status")
    kill "$exporter"; wait "$exporter" 2>/dev/null || true
    exporter=
}

# Prints one setting's figures; $1 the label, $2 the processes it saw, $3 a last line.
# Sets median, p90 (ms) and per_scrape (CPU ms) for the ratios.
report() {
    local out
    out=$(sort -g "$work/lat" | awk -v label="$1" -v first="$first" -v cold_cpu="$cold_cpu" \
        -v cpu_ms="$cpu_ms" -v n="$SCRAPES" -v procs="$2" -v rss="$rss" -v extra="$3" '
        { v[NR] = $1 * 1000 }
        END {
            printf "%s: %s processes matched\n", label, procs
            printf "  cold first scrape: %.1f ms, exporter CPU %d ms\n", first * 1000, cold_cpu
            printf "  next %d scrapes: median %.1f ms, p90 %.1f ms, max %.1f ms; exporter CPU %.2f ms per scrape\n",
                n, v[int((NR + 1) / 2)], v[int(NR * 0.9 + 0.5)], v[NR], cpu_ms / n
            printf "  %sexporter RSS %d KiB\n", extra, rss
            printf "=%.3f %.3f %.3f\n", v[int((NR + 1) / 2)], v[int(NR * 0.9 + 0.5)], cpu_ms / n
        }')
    grep -v '^=' <<<"$out"
    read -r median p90 per_scrape < <(sed -n 's/^=//p' <<<"$out")
}

# memtrial in one setting.
measure_memtrial() {
    local label=$1 max_age=$2
    "$BIN" exporter --listen "127.0.0.1:$PORT" --match "^$name\$" \
        --budget "$BUDGET" --max-age "$max_age" 2>/dev/null &
    exporter=$!
    await "$PORT"
    scrape "$PORT"
    local procs reads
    procs=$(awk -v g="memtrial_group_processes{group=\"$name\"}" '$1 == g {print $2}' "$work/last")
    reads=$(grep '^memtrial_exporter_costly_reads_total' "$work/last" | sed 's/memtrial_exporter_costly_reads_total//' | tr '\n' ' ')
    report "$label" "$procs" "costly reads $reads; "
    local deferred
    deferred=$(awk '$1 == "memtrial_exporter_costly_reads_total{outcome=\"deferred\"}" {print $2}' "$work/last")
    if [ "$max_age" = 0s ] && [ "${deferred:-0}" != 0 ]; then
        echo "  warning: $deferred costly reads deferred (the budget ran out): not every figure was re-read at every scrape; a busy machine? rerun, or raise BUDGET"
    fi
}

# process-exporter on the same processes: one group, exactly the processes of that name.
measure_process_exporter() {
    printf 'process_names:\n  - name: "{{.Comm}}"\n    comm:\n      - %s\n' "$name" >"$work/pe.yml"
    # shellcheck disable=SC2086 # PE_FLAGS is a list of flags
    "$PE" -web.listen-address "127.0.0.1:$PE_PORT" -config.path "$work/pe.yml" \
        -gather-smaps=true $PE_FLAGS >/dev/null 2>&1 &
    exporter=$!
    await "$PE_PORT"
    scrape "$PE_PORT"
    local procs
    procs=$(awk -v g="namedprocess_namegroup_num_procs{groupname=\"$name\"}" '$1 == g {print $2}' "$work/last")
    report "process-exporter (-gather-smaps=true${PE_FLAGS:+ $PE_FLAGS})" "$procs" ""
}

# The kernel's own share: a small C loop that opens, reads whole and closes the given files
# of every process, 20 rounds; its CPU time (user + system, from getrusage) per round. No
# exporter reads these files for less.
cat >"$work/floor.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static char buf[1 << 20];
static double cpu(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}
int main(int argc, char **argv) { /* floor FILE,FILE... PID... */
    char *files[16], *list = strdup(argv[1]);
    int nf = 0, rounds = 20;
    for (char *t = strtok(list, ","); t && nf < 16; t = strtok(NULL, ",")) files[nf++] = t;
    double c0 = cpu();
    for (int r = 0; r < rounds; r++)
        for (int i = 2; i < argc; i++)
            for (int f = 0; f < nf; f++) {
                char p[64];
                snprintf(p, sizeof p, "/proc/%s/%s", argv[i], files[f]);
                int fd = open(p, O_RDONLY | O_CLOEXEC);
                if (fd < 0) continue;
                while (read(fd, buf, sizeof buf) > 0) {}
                close(fd);
            }
    printf("kernel floor: reading %s of the %d processes costs %.1f ms CPU\n", argv[1], argc - 2,
           (cpu() - c0) * 1000 / rounds);
    return 0;
}
C
gcc -O2 -o "$work/floor" "$work/floor.c"
floor() { "$work/floor" "$1" "${pids[@]}"; }

echo "exporter_scrape: $PROCS processes x $THREADS threads x $KIB KiB, $SCRAPES scrapes every ${PAUSE}s, budget $BUDGET, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
floor smaps_rollup
floor smaps_rollup,maps,status,stat,cgroup
measure_memtrial "memtrial, cached (--max-age 30s)" 30s
measure_memtrial "memtrial, uncached (--max-age 0s)" 0s
read -r mt_median mt_p90 mt_cpu <<<"$median $p90 $per_scrape"
measure_process_exporter
awk -v a="$mt_cpu" -v b="$per_scrape" -v m="$mt_median" -v n="$median" -v p="$mt_p90" -v q="$p90" 'BEGIN {
    printf "process-exporter / memtrial uncached: CPU per scrape %.1f / %.1f ms = %.1fx; latency median %.1f / %.1f ms = %.1fx, p90 %.1f / %.1f ms = %.1fx\n",
        b, a, (a > 0 ? b / a : 0), n, m, (m > 0 ? n / m : 0), q, p, (p > 0 ? q / p : 0)
}'
