#!/usr/bin/env bash
# What the reads near every peak cost (issue 36: the baseline explained, always): the
# rungs of 5% at which memtrial reads smaps (probe/regions.rs) and the probe library takes
# the allocator's live/held and its account of free memory (probe-shim/shim.c), on a job
# whose heap, with holes, grows until it stops — measured against one read at the peak,
# taken by this script in the same run, and against the workload's own CPU.
#
#   bash benches/peak_reads_cost.sh      # from the repo root; no arguments; ~2 min
#
# Workload: tests/fixtures/c/grow.c, THREADS threads growing MIB MiB live over GROW_S
# seconds (a glibc arena each: the demo's shape), then holding HOLD_S seconds at the peak.
# While it holds, this script finds it (the process running grow with these arguments),
# reads its /proc/PID/smaps READS times and takes the CPU time of one read (python's
# thread CPU clock: the kernel's page walk and printing is nearly all of it), and reads the
# probe thread's CPU time (/proc/PID/task/TID/schedstat of the thread that is not main:
# the workers have ended) at the start and the end of the hold, with the lines the probe
# wrote meanwhile: the cost of one sample at the peak.
#
# Printed per run: the regions reads memtrial made, their CPU in all (the record's
# read_seconds), that over one read at the peak; the probe thread's CPU over the growth,
# that over one sample at the peak; both as a share of the workload's CPU (wait4); and
# where the last regions read, the allocator's account and live/held lie against the peak.
#
# Environment (all optional):
#   MEMTRIAL   memtrial binary              (default target/release/memtrial; built if missing)
#   VARIANTS   variants                     (default glibc,jemalloc)
#   THREADS    threads                      (default 16)
#   MIB        MiB live at the peak         (default 800)
#   GROW_S     seconds of growth            (default 3)
#   HOLD_S     seconds held at the peak     (default 6)
#   RUNS       runs per variant             (default 3)
#   READS      smaps reads at the peak      (default 5)
#
# A benchmark, not a test: it prints the figures and exits 0 unless something broke.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
MEMTRIAL=${MEMTRIAL:-$ROOT/target/release/memtrial}
[[ -x $MEMTRIAL ]] || cargo build --release --locked
VARIANTS=${VARIANTS:-glibc,jemalloc} THREADS=${THREADS:-16} MIB=${MIB:-800}
GROW_S=${GROW_S:-3} HOLD_S=${HOLD_S:-6} RUNS=${RUNS:-3} READS=${READS:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/memtrial-peakreads.XXXXXX")
watcher=""
cleanup() {
    [[ -n $watcher ]] && kill "$watcher" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
gcc -O2 -Wall -pthread -o "$work/grow" "$ROOT/tests/fixtures/c/grow.c"

# The watcher: at each hold, one smaps read's CPU and the probe thread's CPU per sample.
python3 - "$work" "$THREADS" "$MIB" "$GROW_S" "$HOLD_S" "$READS" > "$work/watch.jsonl" <<'PY' &
import json, os, sys, time
work, threads, mib, grow_s, hold_s, reads = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
want = [f"{work}/grow", threads, mib, sys.argv[4], sys.argv[5]]
seen = set()
def cmd(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
    except OSError:
        return None
def probe_cpu(pid):
    """(ns, thread) of the thread that is not main, once the workers have ended."""
    try:
        tids = [t for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
        if len(tids) != 1:
            return None
        return int(open(f"/proc/{pid}/task/{tids[0]}/schedstat").read().split()[0])
    except (OSError, ValueError):
        return None
while True:
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in seen:
            continue
        c = cmd(p)
        if c is None or [x.decode(errors="replace") for x in c] != want:
            continue
        pid = int(p)
        seen.add(pid)
        # Wait for the hold: the workers gone, the probe thread alone beside main.
        t0 = time.time()
        first = None
        while time.time() - t0 < grow_s * 10 + 30:
            first = probe_cpu(pid)
            if first is not None:
                break
            time.sleep(0.02)
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        pdir = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"MEMTRIAL_PROBE_DIR=")), None)
        def probe_lines():
            try:
                return sum(1 for l in open(f"{pdir}/{pid}") if not l.startswith("#"))
            except (OSError, TypeError):
                return None
        l0 = probe_lines()
        costs = []
        for _ in range(reads):
            c0 = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
            try:
                open(f"/proc/{pid}/smaps").read()
            except OSError:
                break
            costs.append(time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID) - c0)
            time.sleep(0.2)
        time.sleep(max(0.0, hold_s - 2.5))
        last = probe_cpu(pid)
        l1 = probe_lines()
        costs.sort()
        print(json.dumps({
            "pid": pid,
            "smaps_read_s": costs[len(costs) // 2] if costs else None,
            "probe_cpu_at_hold_s": first / 1e9 if first is not None else None,
            "probe_sample_s": (last - first) / 1e9 / (l1 - l0) if None not in (first, last, l0, l1) and l1 > l0 else None,
        }), flush=True)
    time.sleep(0.05)
PY
watcher=$!

(cd "$work" && "$MEMTRIAL" run -q --runs "$RUNS" --variants "$VARIANTS" --json out.json -- \
    "$work/grow" "$THREADS" "$MIB" "$GROW_S" "$HOLD_S" > /dev/null)
sleep 1
python3 - "$work/out.json" "$work/watch.jsonl" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
watch = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
runs = []
for v in d["variants"]:
    for r in v["runs"]:
        runs.append((r.get("started_at", ""), v["name"], r))
runs.sort(key=lambda x: x[0])
print(f"{'variant':9} {'peak MiB':>8} {'cpu s':>6} | {'reads':>5} {'reads s':>7} {'1 read':>7} {'x read':>6} {'% cpu':>6} {'kept at':>7} | "
      f"{'samples':>7} {'probe s':>7} {'1 smpl':>7} {'x smpl':>6} {'% cpu':>6} {'acct at':>7} {'l/h at pk':>9}")
for (_, name, r), w in zip(runs, watch + [{}] * len(runs)):
    peak = r["peak_rss_bytes"]
    cpu = r["cpu_user_seconds"] + r["cpu_sys_seconds"]
    g = r.get("regions") or {}
    a = (r.get("inside") or {}).get("allocator") or {}
    h = a.get("holes") or {}
    one = w.get("smaps_read_s")
    reads_s = g.get("read_seconds", 0.0)
    kept = max(g.get("tree_rss_bytes", 0), g.get("status_rss_bytes", 0)) / peak if g else 0
    smpl = w.get("probe_sample_s")
    probe = w.get("probe_cpu_at_hold_s")
    at_peak = sum(1 for p in a.get("series", []) if (p.get("rss_bytes") or 0) >= 0.9 * peak)
    fmt = lambda x, f: (f % x) if x is not None else "-"
    print(f"{name:9} {peak / 2**20:8.0f} {cpu:6.2f} | {g.get('reads', 0):5d} {reads_s:7.3f} {fmt(one and 1000 * one, '%5.1fms'):>7} "
          f"{fmt(one and reads_s / one, '%6.1f'):>6} {100 * reads_s / cpu:5.1f}% {100 * kept:6.1f}% | "
          f"{len(a.get('series', [])):7d} {fmt(probe, '%7.3f'):>7} {fmt(smpl and 1000 * smpl, '%5.1fms'):>7} "
          f"{fmt(probe and smpl and probe / smpl, '%6.1f'):>6} {fmt(probe and 100 * probe / cpu, '%5.1f%%'):>6} "
          f"{fmt(h and 100 * h.get('resident_bytes', 0) / peak, '%6.1f%%'):>7} {at_peak:9d}")
print("reads s: memtrial's smaps reads over the run (CPU); 1 read: one smaps read at the peak, by this script;")
print("x read: the run's reads in reads at the peak; probe s: the probe thread's CPU over the growth (samples,")
print("accounts, statm); 1 smpl: one sample at the peak (the hold's CPU over its lines); % cpu: of the workload's CPU;")
print("kept at / acct at: the regions read kept / the allocator's account, against the peak; l/h at pk: samples at >= 90%.")
PY
