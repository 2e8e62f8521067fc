#!/usr/bin/env bash
# Measures the cost of memtrial's regions reader (probe/regions.rs: every live process's
# /proc/PID/smaps, read at new highs of the tree's RSS within 0.5% of a core plus a 40 ms
# burst) on a process with many mappings, from the records memtrial writes: how many reads
# a run got, what each cost, the share of a core they took over the run, and whether the
# read kept lies near the peak. Measured on 2 cores: 7-9 ms a read for 2,000 mappings and 1 GiB
# resident, 10-11 reads in an 8.7 s run (0.9-1.1% of a core: the 40 ms burst plus 0.5%), the read
# kept at 89-100% of the peak.
#
#   bash benches/regions_cost.sh        # from the repo root; no arguments; ~1 min
#
# Workload: python3 maps MAPPINGS anonymous regions of 64 KiB (each a mapping of its own:
# every other page range is protected differently so the kernel cannot merge them),
# touches HOLD_MIB MiB, grows for GROW_S seconds and then holds for HOLD_S seconds.
#
# Environment (all optional):
#   MEMTRIAL   memtrial binary            (default target/release/memtrial; built if missing)
#   MAPPINGS   distinct mappings           (default 2000)
#   HOLD_MIB   MiB resident at the peak    (default 1024)
#   GROW_S     seconds of growth           (default 3)
#   HOLD_S     seconds held at the peak    (default 5)
#   RUNS       runs                        (default 3)
#
# A benchmark, not a test: it prints the figures and exits 0 unless something broke.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MEMTRIAL=${MEMTRIAL:-target/release/memtrial}
[[ -x $MEMTRIAL ]] || cargo build --release --locked
MAPPINGS=${MAPPINGS:-2000} HOLD_MIB=${HOLD_MIB:-1024} GROW_S=${GROW_S:-3} HOLD_S=${HOLD_S:-5} RUNS=${RUNS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/hold.py" <<PY
import mmap, time
maps = []
for i in range($MAPPINGS):
    m = mmap.mmap(-1, 64 << 10, prot=mmap.PROT_READ | mmap.PROT_WRITE if i % 2 else mmap.PROT_READ)
    maps.append(m)
for m in maps[1::2]:
    m[0:1] = b"x"
chunks, step = [], max(1, $HOLD_MIB // 64)
t0 = time.time()
for i in range(64):
    chunks.append(bytearray(step << 20))
    time.sleep($GROW_S / 64)
time.sleep($HOLD_S)
PY
(cd "$work" && "$OLDPWD/$MEMTRIAL" run -q --runs "$RUNS" --variants glibc --json out.json -- python3 hold.py > /dev/null)
python3 - "$work/out.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{'run':>3} {'wall s':>7} {'peak MiB':>9} {'reads':>5} {'ms/read':>8} {'% core':>7} {'kept at':>8} {'of peak':>8}")
for i, r in enumerate(d["variants"][0]["runs"]):
    g = r.get("regions")
    if not g:
        print(f"{i:>3} no regions read"); continue
    per = 1000 * g["read_seconds"] / max(1, g["reads"])
    share = 100 * g["read_seconds"] / r["wall_seconds"]
    print(f"{i:>3} {r['wall_seconds']:7.2f} {r['peak_rss_bytes']/2**20:9.0f} {g['reads']:5d} {per:8.2f} {share:7.3f} "
          f"{g['t_seconds']:7.2f}s {100*g['tree_rss_bytes']/r['peak_rss_bytes']:7.1f}%")
PY
