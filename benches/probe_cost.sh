#!/usr/bin/env bash
# Measures the cost of memtrial's allocator probe (probe-shim/shim.c) inside a workload:
# the CPU of its sampling thread, the peak RSS it adds to a process, and its effect on
# the demo's peak RSS.
#
#   bash benches/probe_cost.sh          # from the repo root; no arguments; ~8 min on 2 cores
#
# 1. CPU: benches/probe_hold.c holds PC_MIB MiB in ~1 KiB blocks across 8 threads (and
#    64 threads: 16 glibc arenas on 2 CPUs), optionally with every other block freed
#    ("frag": ~100k free chunks, which glibc's mallinfo2 walks), then sleeps. It runs
#    with LD_PRELOAD="<allocator> <shim>" and MEMTRIAL_PROBE_DIR set, all cases of one
#    interval at once. Over a window while the program sleeps, the CPU time of every
#    thread is read from /proc/PID/task/TID/schedstat (ns): the thread whose time grows
#    is the probe's; the rest of the process is the control (~0). One process without
#    the probe runs alongside. Per-sample cost = probe CPU / lines it wrote.
# 2. RSS: `memtrial run` (its static spawner, wait4 ru_maxrss: no launcher image in the
#    peak, unlike /usr/bin/time) of /bin/true and of probe_hold 8 threads × PC_MIB MiB,
#    with the default probes and with --no-probes, RSS_RUNS runs per variant; medians.
# 3. Demo: the demo's workload (`memtrial workload fragment`, every variant, as
#    `memtrial demo` runs it) through `memtrial run`, with and without probes, DEMO_RUNS
#    runs each, the same --seed; median peak RSS per variant and the ratio.
#
# Environment (all optional):
#   MEMTRIAL          memtrial binary               (default target/release/memtrial; built if missing)
#   PC_MIB            MiB held by probe_hold        (default 200)
#   PC_WINDOW_SLOW    CPU window at 1000 ms, s      (default 12)
#   PC_WINDOW_FAST    CPU window at 100 ms, s       (default 6)
#   RSS_RUNS          runs per variant, section 2   (default 7)
#   DEMO_RUNS         runs per variant, section 3   (default 5; 0 skips the section)
#   PC_CPU_TARGET     % of one core at 1000 ms      (default 0.2)
#   PC_RSS_TARGET     KiB added per process         (default 1024)
#   PC_DEMO_TARGET    |with/without - 1|, %         (default 1)
#
# A benchmark, not a test: PASS/FAIL is printed per target but the exit status is 0
# unless something broke (build failure, memtrial failing, a workload not starting).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

MIB=${PC_MIB:-200}
WIN_SLOW=${PC_WINDOW_SLOW:-12}
WIN_FAST=${PC_WINDOW_FAST:-6}
RSS_RUNS=${RSS_RUNS:-7}
DEMO_RUNS=${DEMO_RUNS:-5}
CPU_TARGET=${PC_CPU_TARGET:-0.2}
RSS_TARGET=${PC_RSS_TARGET:-1024}
DEMO_TARGET=${PC_DEMO_TARGET:-1}
MEMTRIAL=${MEMTRIAL:-$ROOT/target/release/memtrial}
LIBDIR=/usr/lib/x86_64-linux-gnu
declare -A ALLOC=(
    [glibc]=""
    [jemalloc]=$LIBDIR/libjemalloc.so.2
    [tcmalloc]=$LIBDIR/libtcmalloc_minimal.so.4
    [mimalloc]=$LIBDIR/libmimalloc.so.2
)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/memtrial-probecost.XXXXXX")
PIDS=()

cleanup() {
    local rc=$? p
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "probe_cost.sh: $*" >&2; exit 1; }
now() { local t=$EPOCHREALTIME; echo "${t/[.,]/}"; } # wall clock, µs

if [[ ! -x $MEMTRIAL ]]; then
    echo "building memtrial (cargo build --release)..." >&2
    cargo build --release >&2 || die "cargo build failed"
fi
[[ -x $MEMTRIAL ]] || die "no memtrial binary at $MEMTRIAL"
HOLD=$TMP/probe_hold
gcc -O2 -Wall -pthread -o "$HOLD" "$ROOT/benches/probe_hold.c" || die "compiling probe_hold.c failed"
for a in jemalloc tcmalloc mimalloc; do
    [[ -e ${ALLOC[$a]} ]] || die "${ALLOC[$a]} missing (run scripts/setup.sh)"
done

# The shim this memtrial preloads: the last word of LD_PRELOAD in a glibc run (exact,
# unlike the newest file in /tmp/memtrial-UID, which another build may have written).
"$MEMTRIAL" run --runs 1 --variants glibc --quiet --db "$TMP/shim.db" -- \
    sh -c "printf '%s\n' \"\$LD_PRELOAD\" > '$TMP/preload'" >"$TMP/shim.log" 2>&1 \
    || { cat "$TMP/shim.log" >&2; die "memtrial run failed"; }
SHIM=$(awk '{ print $NF }' "$TMP/preload")
[[ $SHIM == *libmemtrial-probe-*.so && -f $SHIM ]] \
    || die "memtrial preloads no probe shim (LD_PRELOAD='$(cat "$TMP/preload")'; built without a C compiler?)"

T_START=$(now)
echo "memtrial probe cost: $(nproc) CPUs, kernel $(uname -r), $(ldd --version | head -1)"
echo "binary: $MEMTRIAL"
echo "shim:   $SHIM ($(stat -c %s "$SHIM") bytes)"

# ---------------------------------------------------------------------------------------
# 1. CPU of the probe thread
# ---------------------------------------------------------------------------------------
# Cases: name allocator threads mode
CASES=(
    "glibc:8 glibc 8 hold"
    "glibc:8:frag glibc 8 frag"
    "glibc:64 glibc 64 hold"
    "glibc:64:frag glibc 64 frag"
    "jemalloc:8 jemalloc 8 hold"
    "jemalloc:8:frag jemalloc 8 frag"
    "tcmalloc:8 tcmalloc 8 hold"
    "tcmalloc:8:frag tcmalloc 8 frag"
    "mimalloc:8 mimalloc 8 hold"
    "mimalloc:8:frag mimalloc 8 frag"
    "glibc:64:frag:noprobe glibc 64 frag"
)

# "tid ns" for every thread of PID (CPU time from schedstat's first field).
task_cpu() {
    local t
    for t in /proc/"$1"/task/*; do
        [[ -r $t/schedstat ]] || continue
        echo "${t##*/} $(cut -d' ' -f1 "$t/schedstat" 2>/dev/null || echo 0)"
    done
}
lines_of() { cat "$1"/* 2>/dev/null | grep -vc '^#' || true; }

declare -A CPU_PROBE CPU_REST CPU_US CPU_N CPU_TID
cpu_batch() {
    local iv=$1 win=$2
    local -a pids=() names=()
    local c name alloc th mode k pd pre
    PIDS=()
    for c in "${CASES[@]}"; do
        read -r name alloc th mode <<<"$c"
        pd=$TMP/cpu-$iv-${name//:/-}
        mkdir -p "$pd/probe"
        pre="${ALLOC[$alloc]:+${ALLOC[$alloc]} }$SHIM"
        if [[ $name == *noprobe ]]; then
            pre=${ALLOC[$alloc]}
            env ${pre:+LD_PRELOAD="$pre"} "$HOLD" "$th" "$MIB" 3600 "$mode" >"$pd/out" 2>&1 &
        else
            env LD_PRELOAD="$pre" MEMTRIAL_PROBE_DIR="$pd/probe" MEMTRIAL_PROBE_INTERVAL_MS="$iv" \
                "$HOLD" "$th" "$MIB" 3600 "$mode" >"$pd/out" 2>&1 &
        fi
        pids+=($!); names+=("$name"); PIDS+=($!)
    done
    local deadline=$(( $(now) + 120000000 ))
    for k in "${!pids[@]}"; do
        pd=$TMP/cpu-$iv-${names[$k]//:/-}
        until grep -q ready "$pd/out" 2>/dev/null; do
            kill -0 "${pids[$k]}" 2>/dev/null || { cat "$pd/out" >&2; die "probe_hold (${names[$k]}) exited early"; }
            (( $(now) < deadline )) || die "probe_hold (${names[$k]}) not ready after 120s"
            sleep 0.1
        done
    done
    sleep 2 # let the last page faults and the first samples settle
    local ta tb
    declare -A before=() lines0=()
    ta=$(now)
    for k in "${!pids[@]}"; do
        while read -r tid ns; do before[${pids[$k]}:$tid]=$ns; done < <(task_cpu "${pids[$k]}")
        lines0[$k]=$(lines_of "$TMP/cpu-$iv-${names[$k]//:/-}/probe")
    done
    sleep "$win"
    tb=$(now)
    local wall_ns=$(( (tb - ta) * 1000 ))
    for k in "${!pids[@]}"; do
        local best=0 best_tid=- rest=0 d
        while read -r tid ns; do
            [[ -n ${before[${pids[$k]}:$tid]:-} ]] || continue
            d=$(( ns - before[${pids[$k]}:$tid] ))
            if (( d > best )); then
                rest=$(( rest + best )); best=$d; best_tid=$tid
            else
                rest=$(( rest + d ))
            fi
        done < <(task_cpu "${pids[$k]}")
        local n=$(( $(lines_of "$TMP/cpu-$iv-${names[$k]//:/-}/probe") - lines0[$k] ))
        local key="$iv ${names[$k]}"
        if [[ ${names[$k]} == *noprobe ]]; then
            # No probe: everything the process used is its own.
            rest=$(( rest + best )); best=0; best_tid=-
        fi
        CPU_PROBE[$key]=$(awk -v a="$best" -v w="$wall_ns" 'BEGIN { printf "%.4f", 100 * a / w }')
        CPU_REST[$key]=$(awk -v a="$rest" -v w="$wall_ns" 'BEGIN { printf "%.4f", 100 * a / w }')
        CPU_N[$key]=$n
        CPU_TID[$key]=$best_tid
        CPU_US[$key]=$(awk -v a="$best" -v n="$n" 'BEGIN { if (n > 0) printf "%.1f", a / n / 1000; else print "-" }')
    done
    # Each by its PID; reaped here so that bash reports no "Killed" jobs.
    { for k in "${!pids[@]}"; do kill -KILL "${pids[$k]}"; wait "${pids[$k]}"; done; } 2>/dev/null || true
    PIDS=()
}

echo
echo "[1/3] probe thread CPU: probe_hold x ${MIB} MiB, windows ${WIN_SLOW}s (1000 ms) and ${WIN_FAST}s (100 ms)..."
cpu_batch 1000 "$WIN_SLOW"
cpu_batch 100 "$WIN_FAST"

# ---------------------------------------------------------------------------------------
# 2. Peak RSS per probed process
# ---------------------------------------------------------------------------------------
# median peak RSS (bytes) per variant from a memtrial --json record: "variant median min max"
peaks() {
    python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for v in d["variants"]:
    runs = [r["peak_rss_bytes"] for r in v["runs"] if r.get("status") == "ok" and not r.get("warmup") and r.get("peak_rss_bytes")]
    med = v["summary"]["peak_rss_bytes"]["median"]
    print(v["name"], int(med) if med is not None else "-", min(runs) if runs else "-", max(runs) if runs else "-", len(runs))
EOF
}

mt_json() { # out.json extra-args... -- command...
    local out=$1; shift
    "$MEMTRIAL" run --quiet --seed 1 --db "$TMP/run.db" --json "$out" "$@" >"$out.log" 2>&1 \
        || { cat "$out.log" >&2; die "memtrial run $* failed"; }
}

declare -A RSS_WITH RSS_WITHOUT RSS_RANGE
rss_case() {
    local label=$1; shift
    mt_json "$TMP/rss-$label-with.json" --runs "$RSS_RUNS" --variants glibc,jemalloc,tcmalloc,mimalloc -- "$@"
    mt_json "$TMP/rss-$label-without.json" --runs "$RSS_RUNS" --variants glibc,jemalloc,tcmalloc,mimalloc --no-probes -- "$@"
    local v med lo hi n
    while read -r v med lo hi n; do
        RSS_WITH[$label $v]=$med
        RSS_RANGE[$label $v]="$(( lo / 1024 ))..$(( hi / 1024 ))"
    done < <(peaks "$TMP/rss-$label-with.json")
    while read -r v med lo hi n; do
        RSS_WITHOUT[$label $v]=$med
        RSS_RANGE[$label $v]="${RSS_RANGE[$label $v]} / $(( lo / 1024 ))..$(( hi / 1024 ))"
    done < <(peaks "$TMP/rss-$label-without.json")
}

echo "[2/3] peak RSS with and without the probe: $RSS_RUNS runs per variant through memtrial run..."
rss_case true /bin/true
rss_case hold "$HOLD" 8 "$MIB" 1 hold

# ---------------------------------------------------------------------------------------
# 3. The demo's workload with and without the probe
# ---------------------------------------------------------------------------------------
declare -A DEMO_WITH DEMO_WITHOUT DEMO_SPREAD
DEMO_VARIANTS=()
if (( DEMO_RUNS > 0 )); then
    echo "[3/3] the demo's workload ($MEMTRIAL workload fragment), every variant, $DEMO_RUNS runs with and without probes..."
    mt_json "$TMP/demo-with.json" --runs "$DEMO_RUNS" -- "$MEMTRIAL" workload fragment
    mt_json "$TMP/demo-without.json" --runs "$DEMO_RUNS" --no-probes -- "$MEMTRIAL" workload fragment
    while read -r v med lo hi n; do
        DEMO_VARIANTS+=("$v"); DEMO_WITH[$v]=$med; DEMO_SPREAD[$v]="$n runs, $lo..$hi"
    done < <(peaks "$TMP/demo-with.json")
    while read -r v med lo hi n; do
        DEMO_WITHOUT[$v]=$med; DEMO_SPREAD[$v]="${DEMO_SPREAD[$v]} / $n runs, $lo..$hi"
    done < <(peaks "$TMP/demo-without.json")
fi

# ---------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v < t ? "PASS" : "FAIL") }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }

echo
echo "================================ SUMMARY ================================"
echo "1. Probe thread CPU (% of one core, while the program sleeps; schedstat ns)"
printf '   %-24s %9s %9s %7s %9s | %9s %9s %7s\n' case "1000ms %" "µs/sample" samples "rest %" "100ms %" "µs/sample" samples
for c in "${CASES[@]}"; do
    read -r name _ <<<"$c"
    s="1000 $name"; f="100 $name"
    printf '   %-24s %9s %9s %7s %9s | %9s %9s %7s\n' "$name" \
        "${CPU_PROBE[$s]}" "${CPU_US[$s]}" "${CPU_N[$s]}" "${CPU_REST[$s]}" \
        "${CPU_PROBE[$f]}" "${CPU_US[$f]}" "${CPU_N[$f]}"
done
echo "   (\"rest\": the program's other threads in the 1000 ms window, the control; noprobe: no shim)"
worst_cpu=0; worst_case=
for c in "${CASES[@]}"; do
    read -r name _ <<<"$c"
    [[ $name == *noprobe ]] && continue
    if awk -v a="${CPU_PROBE[1000 $name]}" -v b="$worst_cpu" 'BEGIN { exit !(a > b) }'; then
        worst_cpu=${CPU_PROBE[1000 $name]}; worst_case=$name
    fi
done
printf '   worst at 1000 ms: %s%% (%s)   target < %s%%   %s\n' "$worst_cpu" "$worst_case" "$CPU_TARGET" "$(verdict "$worst_cpu" "$CPU_TARGET")"

echo
echo "2. Peak RSS per process (memtrial run, median of $RSS_RUNS; KiB)"
printf '   %-10s %-9s %10s %10s %9s   %s\n' program variant "probe" "no probe" "added" "range with / without (KiB)"
worst_rss=-999999; worst_rcase=
for label in true hold; do
    for v in glibc jemalloc tcmalloc mimalloc; do
        w=${RSS_WITH[$label $v]:--}; o=${RSS_WITHOUT[$label $v]:--}
        [[ $w == - || $o == - ]] && { printf '   %-10s %-9s %10s\n' "$label" "$v" "no data"; continue; }
        add=$(( (w - o) / 1024 ))
        (( add > worst_rss )) && { worst_rss=$add; worst_rcase="$label/$v"; }
        printf '   %-10s %-9s %10d %10d %+9d   %s\n' "$label" "$v" $(( w / 1024 )) $(( o / 1024 )) "$add" "${RSS_RANGE[$label $v]}"
    done
done
echo "   (true = /bin/true; hold = probe_hold 8 threads x $MIB MiB for 1 s)"
printf '   worst added: %s KiB (%s)   target < %s KiB   %s\n' "$worst_rss" "$worst_rcase" "$RSS_TARGET" "$(verdict "$worst_rss" "$RSS_TARGET")"

if (( DEMO_RUNS > 0 )); then
    echo
    echo "3. Demo workload (memtrial workload fragment), median peak RSS, $DEMO_RUNS runs each"
    printf '   %-9s %10s %10s %8s   %s\n' variant "probe MiB" "none MiB" ratio "runs with / without (bytes)"
    worst_dev=0; worst_v=
    for v in "${DEMO_VARIANTS[@]}"; do
        w=${DEMO_WITH[$v]}; o=${DEMO_WITHOUT[$v]:--}
        [[ $w == - || $o == - ]] && { printf '   %-9s no data\n' "$v"; continue; }
        r=$(awk -v a="$w" -v b="$o" 'BEGIN { printf "%.4f", a / b }')
        dev=$(awk -v r="$r" 'BEGIN { d = 100 * (r - 1); if (d < 0) d = -d; printf "%.2f", d }')
        if awk -v a="$dev" -v b="$worst_dev" 'BEGIN { exit !(a > b) }'; then worst_dev=$dev; worst_v=$v; fi
        printf '   %-9s %10s %10s %8s   %s\n' "$v" "$(mib "$w")" "$(mib "$o")" "$r" "${DEMO_SPREAD[$v]}"
    done
    printf '   worst |ratio-1|: %s%% (%s)   target < %s%%   %s\n' "$worst_dev" "$worst_v" "$DEMO_TARGET" "$(verdict "$worst_dev" "$DEMO_TARGET")"
fi
echo
echo "(a benchmark: exit status 0 regardless of the verdicts; took $(( ($(now) - T_START) / 1000000 ))s)"
