#!/usr/bin/env bash
# Fairness of `memtrial soak`: two identical variants (glibc and `twin`, the same with
# MEMTRIAL_TWIN=1 in the environment, which the server ignores) of the cache-server fixture
# on the same request stream. Anything but 1.00 is the soak's own unfairness (or noise).
# Target: the RSS, working-set, p50 and p95 ratios of twin to glibc 1.00 within ±3%.
#
#   benches/soak_fairness.sh               # 10 min at 500 req/s, windows of 1 min
#   DURATION=5m WINDOW=30s RATE=300 benches/soak_fairness.sh
#   CPUS=0.5 MEMORY_LIMIT=512M benches/soak_fairness.sh   # the same limits on each instance
#
# How the soak makes it fair:
# - each instance runs in its own cgroup (under <cgroup root>/memtrial/, siblings of each
#   other), with the same limits: --cpus, --memory-limit (and --cpuset, --pids-limit) are
#   applied to every instance alike, not shared between them;
# - the same CPU weight: sibling cgroups at the default weight (v2 cpu.weight 100, v1
#   cpu.shares 1024), so under contention the scheduler splits CPU between them equally;
# - the same requests at the same moments: one open-loop schedule, fanned out to one load
#   generator per instance, all sharing the same start instant (latency counted from the
#   intended send time, so a stalled instance cannot hide behind a slower schedule).
# The script prints each instance's requests, due and errors; the ratios with their 95%
# intervals from the JSON; whether each ratio (and its interval) lies within 1 ± 3%; and each
# instance's CPU seconds (summed over its windows from the soak's database) with the CPU ratio,
# to show the two got an equal share.
#
# Environment: RATE (500 req/s per instance), DURATION (10m), WINDOW (1m), CONNS (16),
# CPUS, MEMORY_LIMIT (unset: no limit), MT (a memtrial binary to use instead of building
# one), OUT (a directory to keep; default a temporary one). Root (each instance gets a
# cgroup). Loopback only; it stops by itself after DURATION.
set -euo pipefail

RATE=${RATE:-500}
DURATION=${DURATION:-10m}
WINDOW=${WINDOW:-1m}
CONNS=${CONNS:-16}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
cd "$OUT"

command -v python3 >/dev/null 2>&1 || {
    echo "installing python3 (apt)…" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y python3 >/dev/null
}
if [ -z "${MT:-}" ]; then
    cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml"
    MT="$ROOT/target/release/memtrial"
fi
LIMITS=()
[ -n "${CPUS:-}" ] && LIMITS+=(--cpus "$CPUS")
[ -n "${MEMORY_LIMIT:-}" ] && LIMITS+=(--memory-limit "$MEMORY_LIMIT")

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "soak: glibc + twin, $RATE req/s each, $CONNS connections each, $DURATION, window $WINDOW${LIMITS[*]:+, limits ${LIMITS[*]}}"
"$MT" --db soak.db soak --variants glibc --variant 'twin=MEMTRIAL_TWIN=1' "${LIMITS[@]}" \
    --url 'http://127.0.0.1:{port}/' --rate "$RATE" --connections "$CONNS" \
    --duration "$DURATION" --window "$WINDOW" --json soak.json \
    -- "$MT" workload cache-server --port '{port}' >table.txt 2>progress.txt
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
cat table.txt

echo "== fairness ($OUT)"
python3 <<'EOF'
import json, sqlite3
s = json.load(open("soak.json"))
db = sqlite3.connect("soak.db")
cpu_all, cpu_counted = {}, {}
for v, warm, fj in db.execute(
        "SELECT variant, warm, figures_json FROM soak_windows WHERE soak_id = ?", (s["id"],)):
    c = json.loads(fj).get("cpu_seconds") or 0.0
    cpu_all[v] = cpu_all.get(v, 0.0) + c
    if not warm:
        cpu_counted[v] = cpu_counted.get(v, 0.0) + c
for v in s["variants"]:
    print(f"{v['name']:<6} requests {v['requests']:,} due {v['due'] or 0:,} errors {v['errors']}, "
          f"windows {v['windows_counted']}/{v['windows']} counted; CPU {cpu_all.get(v['name'], 0):.1f} s "
          f"({cpu_counted.get(v['name'], 0):.1f} s in counted windows)")
twin = next(v for v in s["variants"] if v["name"] != s["baseline"])
print()
print(f"{twin['name']} / {s['baseline']}   ratio   95% interval      within ±3%: ratio  interval")
ok = True
for key, label in [("rss", "RSS"), ("working_set", "working set"), ("p50_ms", "p50"), ("p95_ms", "p95"),
                   ("pss", "PSS"), ("throughput_rps", "throughput"), ("cpu_seconds", "CPU")]:
    r = twin.get(key)
    if not r:
        print(f"{label:<14} —")
        continue
    lo, hi = r["ci"] if r["ci"] else (float("nan"), float("nan"))
    in_r = abs(r["ratio"] - 1) <= 0.03
    in_ci = r["ci"] is not None and lo >= 0.97 and hi <= 1.03
    target = key in ("rss", "working_set", "p50_ms", "p95_ms")
    if target:
        ok = ok and in_r
    print(f"{label:<14} {r['ratio']:6.3f}  [{lo:.3f}, {hi:.3f}]    {'yes' if in_r else 'NO ':>10}  {'yes' if in_ci else 'no':>8}"
          f"{'' if target else '   (not a target)'}")
print()
print("target (RSS, working set, p50, p95 ratios 1.00 ± 3%):", "met" if ok else "NOT met")
EOF
