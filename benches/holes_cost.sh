#!/usr/bin/env bash
# Measures what the allocator probe's account of free memory (probe-shim/shim.c: glibc's
# malloc_info, jemalloc's size classes, tcmalloc's free lists, written at a paused new high
# of resident memory within 0.1% of a core plus a 60 ms burst) costs and whether it changes
# the runs it measures:
#   1. malloc_info's and mallinfo2's time per free chunk on a glibc heap with N free chunks
#      (both walk every free chunk; malloc_info is what an account costs under glibc);
#   2. the holes fixture (THREADS threads freeing every other one of 100,000 blocks each)
#      under glibc, jemalloc and tcmalloc, with the probes and with --no-probes: the peak RSS
#      of each (the account must not move it) and how near its peak each account lies.
# Measured on 2 cores: about 120 ns per free chunk for each (10 ms at 85k, 100 ms at 860k);
# peaks with and without the probes within 2.5% (glibc +0.1%, jemalloc +0.4%, tcmalloc -2.3%:
# its run-to-run spread); every account at 100% of its run's peak.
#
#   bash benches/holes_cost.sh        # from the repo root; no arguments; ~1 min
#
# Environment (all optional):
#   MEMTRIAL   memtrial binary   (default target/release/memtrial; built if missing)
#   THREADS    fixture threads   (default 4)
#   RUNS       runs per variant  (default 3)
#
# A benchmark, not a test: it prints the figures and exits 0 unless something broke.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MEMTRIAL=${MEMTRIAL:-target/release/memtrial}
[[ -x $MEMTRIAL ]] || cargo build --release --locked
THREADS=${THREADS:-4} RUNS=${RUNS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sh tests/fixtures/c/build.sh "$work/fx" >/dev/null 2>&1
cat > "$work/cost.c" <<'C'
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    void **p = malloc(n * sizeof *p);
    for (long i = 0; i < n; i++) p[i] = malloc(100 + (i % 7) * 50);
    for (long i = 0; i < n; i += 2) free(p[i]);
    FILE *f = fopen("/dev/null", "w");
    double t0 = now(); struct mallinfo2 m = mallinfo2(); double t1 = now();
    malloc_info(0, f); double t2 = now();
    printf("%8zu free chunks: mallinfo2 %6.1f ms, malloc_info %6.1f ms (%.0f ns a chunk)\n",
           m.ordblks, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t2 - t1) * 1e9 / m.ordblks);
    return 0;
}
C
gcc -O2 -o "$work/cost" "$work/cost.c"
echo "1. the walk an account costs under glibc:"
for n in 20000 200000 2000000; do "$work/cost" $n; done
echo
echo "2. the holes fixture ($THREADS threads, $RUNS runs a variant), with and without the probes:"
for probes in on off; do
    extra=()
    [[ $probes == off ]] && extra=(--no-probes)
    "$MEMTRIAL" run -q -n "$RUNS" --variants glibc,jemalloc,tcmalloc "${extra[@]}" \
        --json "$work/$probes.json" -- "$work/fx/holes" frag "$THREADS" 1500 >/dev/null
done
python3 - "$work/on.json" "$work/off.json" <<'PY'
import json, statistics, sys
on, off = (json.load(open(p)) for p in sys.argv[1:3])
def runs(doc, name):
    return next(v for v in doc["variants"] if v["name"] == name)["runs"]
for name in ("glibc", "jemalloc", "tcmalloc"):
    a = statistics.median(r["peak_rss_bytes"] for r in runs(on, name))
    b = statistics.median(r["peak_rss_bytes"] for r in runs(off, name))
    near = []
    for r in runs(on, name):
        h = (r.get("inside", {}).get("allocator") or {}).get("holes")
        near.append(f"{100 * h['resident_bytes'] / r['peak_rss_bytes']:.0f}%" if h else "none")
    print(f"  {name:9} peak {a / 2**20:7.1f} MiB with the probe, {b / 2**20:7.1f} MiB without "
          f"({100 * (a - b) / b:+.1f}%); accounts at {', '.join(near)} of each run's peak")
PY
