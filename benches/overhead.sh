#!/usr/bin/env bash
# Measures memtrial's OWN cost (CPU, peak RSS) while it samples a many-thread process.
#
#   bash benches/overhead.sh            # from the repo root; no arguments
#
# It compiles benches/threads_hold.c, runs
#   memtrial run --runs 1 --variants glibc --db TMP/o.db [--interval I] -- threads_hold N SECS
# in the background and reads memtrial's /proc/PID/stat (utime+stime) and
# /proc/PID/status (VmHWM) at t≈2s and t≈SECS-1 after the workload started, so the
# steady-state figure excludes start-up; the whole-run figure is the last reading
# before memtrial exits, over memtrial's whole lifetime. The workload's thread count
# is read from its /proc/PID/status throughout the window. Over the same window a minimal
# sampler (benches/sampler_floor.c: wake each interval, one pread of the workload's status)
# runs beside it: the floor this machine charges any sampler at that interval (on a VM a
# wake-up alone can cost ~80 µs), against which memtrial's own figure is read.
#
# Environment (all optional):
#   MEMTRIAL          memtrial binary        (default target/release/memtrial; built if missing)
#   OVH_THREADS       workload threads       (default 1000)
#   OVH_SECS          workload duration, s   (default 30, at least 6)
#   OVH_KIB           KiB touched per thread (default 256: ~250 MB RSS for 1000 threads)
#   OVH_INTERVAL      main section interval  (default: memtrial's default, 100ms)
#   OVH_FAST_INTERVAL second section interval (default 20ms; empty to skip)
#   OVH_RATIO         CPU target at the main interval, times the floor (default 1.5)
#   OVH_FAST_RATIO    CPU target at the fast interval, times the floor (default 2)
#   OVH_RSS_TARGET    VmHWM target, MB      (default 30)
#
# A benchmark, not a test: it prints memtrial's CPU as a ratio to the floor measured beside
# it, PASS/FAIL per target, and exits 3 when a CPU ratio is over its target (so that a
# change cannot regrow the sampler's cost silently); 1 when something broke (build failure,
# memtrial failing, the workload not found).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

THREADS=${OVH_THREADS:-1000}
SECS=${OVH_SECS:-30}
KIB=${OVH_KIB:-256}
INTERVAL=${OVH_INTERVAL:-}
FAST_INTERVAL=${OVH_FAST_INTERVAL-20ms}
RATIO_TARGET=${OVH_RATIO:-1.5}
FAST_RATIO_TARGET=${OVH_FAST_RATIO:-2}
OVER=0
RSS_TARGET=${OVH_RSS_TARGET:-30}
MEMTRIAL=${MEMTRIAL:-$ROOT/target/release/memtrial}

if (( SECS < 6 )); then
    echo "overhead.sh: OVH_SECS must be at least 6" >&2
    exit 2
fi

TICK=$(getconf CLK_TCK)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/memtrial-overhead.XXXXXX")
MT_PID=""

cleanup() {
    local rc=$?
    if [[ -n $MT_PID ]] && kill -0 "$MT_PID" 2>/dev/null; then
        # memtrial forwards the interrupt to its workload and cleans up.
        kill -INT "$MT_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$MT_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$MT_PID" 2>/dev/null || true
    fi
    # Anything of ours still holding threads (e.g. memtrial was killed first).
    if [[ -n ${HELPER:-} ]]; then
        local p
        for p in $(pgrep -f "^$HELPER " 2>/dev/null || true); do kill -KILL "$p" 2>/dev/null || true; done
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "overhead.sh: $*" >&2; exit 1; }

if [[ ! -x $MEMTRIAL ]]; then
    echo "building memtrial (cargo build --release)..." >&2
    cargo build --release >&2 || die "cargo build failed"
fi
[[ -x $MEMTRIAL ]] || die "no memtrial binary at $MEMTRIAL"

HELPER=$TMP/threads_hold
gcc -O2 -Wall -pthread -o "$HELPER" "$ROOT/benches/threads_hold.c" || die "compiling threads_hold.c failed"
FLOOR=$TMP/sampler_floor
gcc -O2 -Wall -o "$FLOOR" "$ROOT/benches/sampler_floor.c" || die "compiling sampler_floor.c failed"

# Wall clock in microseconds.
now() { local t=$EPOCHREALTIME; echo "${t/[.,]/}"; }

# CPU time (ns) of every thread of a PID from schedstat: clock ticks (10 ms) are too coarse
# for 0.1% of a core over 20 s (2 ticks). Nothing if it is gone.
cpu_ns() {
    local t s=0 v
    for t in /proc/"$1"/task/*/schedstat; do
        read -r v _ < "$t" 2>/dev/null || continue
        s=$(( s + v ))
    done
    [[ -d /proc/$1 ]] && echo "$s"
    return 0
}

# utime+stime (ticks) of a PID, or nothing if it is gone.
cpu_ticks() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    s=${s##*) }          # fields from 3 (state) on; comm may hold spaces
    local -a f=($s)
    echo $(( f[11] + f[12] ))   # fields 14 and 15
}

# A field of /proc/PID/status (number only), or nothing.
status_field() {
    awk -v k="$2:" '$1 == k { print $2; exit }' "/proc/$1/status" 2>/dev/null || true
}

# Descendant of $1 running the helper.
find_workload() {
    local want=$1 pid ppid comm
    local -a cand=()
    # pid → ppid map of this moment, then walk up from each threads_hold process.
    declare -A parent=()
    while read -r pid ppid comm; do
        parent[$pid]=$ppid
        [[ $comm == threads_hold ]] && cand+=("$pid")
    done < <(ps -e -o pid=,ppid=,comm= 2>/dev/null)
    local c p
    for c in "${cand[@]}"; do
        p=$c
        while [[ -n ${parent[$p]:-} && $p != 1 && $p != 0 ]]; do
            p=${parent[$p]}
            if [[ $p == "$want" ]]; then echo "$c"; return 0; fi
        done
    done
}

# One measurement. Sets R_* globals.
measure() {
    local interval=$1 label=$2
    local db=$TMP/o-$label.db log=$TMP/memtrial-$label.log
    local -a iv=()
    [[ -n $interval ]] && iv=(--interval "$interval")

    local t_mt_start t_wl=""
    t_mt_start=$(now)
    "$MEMTRIAL" run --runs 1 --variants glibc --db "$db" "${iv[@]}" -- "$HELPER" "$THREADS" "$SECS" "$KIB" \
        >"$log" 2>&1 &
    MT_PID=$!

    # Wait for the workload to show up (memtrial start-up, DB creation, spawn).
    local wl="" deadline
    deadline=$(( $(now) + 30000000 ))
    while [[ -z $wl ]]; do
        wl=$(find_workload "$MT_PID" || true)
        if [[ -n $wl ]]; then t_wl=$(now); break; fi
        kill -0 "$MT_PID" 2>/dev/null || { cat "$log" >&2; die "memtrial exited before the workload was seen"; }
        (( $(now) > deadline )) && die "workload not found after 30s"
        sleep 0.02
    done

    sleep_until() { # seconds after the workload was seen
        local d=$(( t_wl + $1 * 1000000 - $(now) ))
        (( d > 0 )) && sleep "$(printf '%d.%06d' $(( d / 1000000 )) $(( d % 1000000 )))"
        return 0
    }

    sleep_until 2
    # The floor: a minimal sampler of the same workload at the same interval, over the
    # same window, beside memtrial.
    local iv_ms=100 floor_out=$TMP/floor-$label.txt
    case $interval in
        *ms) iv_ms=${interval%ms} ;;
        *s) iv_ms=$(( ${interval%s} * 1000 )) ;;
    esac
    "$FLOOR" "$wl" "$iv_ms" "$(( SECS - 3 ))" >"$floor_out" 2>&1 &
    local floor_pid=$!
    local ta ca
    ta=$(now); ca=$(cpu_ticks "$MT_PID"); na=$(cpu_ns "$MT_PID")
    [[ -n $ca ]] || die "memtrial gone at t=2s (see $log)"
    local thr_min=999999999 thr_max=0 th k
    local end=$(( SECS - 1 ))
    for (( k = 3; k <= end; k++ )); do
        th=$(status_field "$wl" Threads)
        if [[ -n $th ]]; then
            (( th < thr_min )) && thr_min=$th
            (( th > thr_max )) && thr_max=$th
        fi
        sleep_until "$k"
    done
    local tb cb hwm_b
    tb=$(now); cb=$(cpu_ticks "$MT_PID"); nb=$(cpu_ns "$MT_PID")
    hwm_b=$(status_field "$MT_PID" VmHWM)
    th=$(status_field "$wl" Threads)
    if [[ -n $th ]]; then
        (( th < thr_min )) && thr_min=$th
        (( th > thr_max )) && thr_max=$th
    fi
    [[ -n $cb ]] || die "memtrial gone before t=$end s (see $log)"
    wait "$floor_pid" || true
    R_FLOOR=$(head -1 "$floor_out")

    # Whole run: keep reading until memtrial exits.
    local tl=$tb cl=$cb hwm=$hwm_b c h
    while kill -0 "$MT_PID" 2>/dev/null; do
        c=$(cpu_ticks "$MT_PID"); h=$(status_field "$MT_PID" VmHWM)
        if [[ -n $c ]]; then tl=$(now); cl=$c; fi
        [[ -n $h ]] && hwm=$h
        sleep 0.05
    done
    local rc=0
    wait "$MT_PID" || rc=$?
    MT_PID=""
    if (( rc != 0 )); then
        cat "$log" >&2
        die "memtrial exited with status $rc"
    fi

    R_LABEL=$label
    R_INTERVAL=${interval:-100ms (default)}
    R_WINDOW=$(awk -v a="$ta" -v b="$tb" 'BEGIN { printf "%.1f", (b - a) / 1e6 }')
    R_CPU_WIN=$(awk -v a="$ca" -v b="$cb" -v ta="$ta" -v tb="$tb" -v hz="$TICK" \
        'BEGIN { printf "%.2f", 100 * (b - a) / hz / ((tb - ta) / 1e6) }')
    R_TICKS_WIN=$(( cb - ca ))
    R_CPU_NS_WIN=$(awk -v a="$na" -v b="$nb" -v ta="$ta" -v tb="$tb" \
        'BEGIN { printf "%.3f", 100 * (b - a) / 1e9 / ((tb - ta) / 1e6) }')
    R_CPU_ALL=$(awk -v c="$cl" -v t0="$t_mt_start" -v t1="$tl" -v hz="$TICK" \
        'BEGIN { printf "%.2f", 100 * c / hz / ((t1 - t0) / 1e6) }')
    R_TICKS_ALL=$cl
    R_WALL_ALL=$(awk -v t0="$t_mt_start" -v t1="$tl" 'BEGIN { printf "%.1f", (t1 - t0) / 1e6 }')
    R_HWM_MB=$(awk -v k="${hwm:-0}" 'BEGIN { printf "%.1f", k / 1024 }')
    R_THR_MIN=$thr_min
    R_THR_MAX=$thr_max
}

verdict() { # value target → PASS/FAIL (value < target)
    awk -v v="$1" -v t="$2" 'BEGIN { print (v < t ? "PASS" : "FAIL") }'
}

# memtrial's CPU over the floor's, both from the same window.
ratio() {
    awk -v a="$R_CPU_NS_WIN" -v f="$R_FLOOR" 'BEGIN { if (f > 0) printf "%.2f", a / f; else print "inf" }'
}

report() { # the ratio's target
    local target=$1 r v
    r=$(ratio)
    v=$(awk -v r="$r" -v t="$target" 'BEGIN { print (r != "inf" && r <= t ? "PASS" : "FAIL") }')
    [[ $v == FAIL ]] && OVER=1
    printf '\n== %s: interval %s ==\n' "$R_LABEL" "$R_INTERVAL"
    printf '  workload threads (window)  : min %s, max %s (incl. main thread; wanted %s+1)\n' \
        "$R_THR_MIN" "$R_THR_MAX" "$THREADS"
    printf '  memtrial CPU, steady state : %6s %% of one core  (%s ticks over %ss, t=2s..%ss)\n' \
        "$R_CPU_WIN" "$R_TICKS_WIN" "$R_WINDOW" "$(( SECS - 1 ))"
    printf '  memtrial CPU, steady (ns)  : %6s %% of one core  (schedstat of all its threads)\n' \
        "$R_CPU_NS_WIN"
    printf '  floor (minimal sampler)    : %6s %% of one core  (wakes each interval, one pread of status: what this machine charges a sampler)\n' \
        "$R_FLOOR"
    printf '  memtrial CPU above floor   : %6s %% of one core\n' \
        "$(awk -v a="$R_CPU_NS_WIN" -v f="$R_FLOOR" 'BEGIN { printf "%.3f", a - f }')"
    printf '  memtrial CPU / floor       : %6s x                                       target <= %sx  %s\n' \
        "$r" "$target" "$v"
    printf '  memtrial CPU, whole run    : %6s %% of one core  (%s ticks over %ss)\n' \
        "$R_CPU_ALL" "$R_TICKS_ALL" "$R_WALL_ALL"
    printf '  memtrial VmHWM             : %6s MB                                       target < %s MB  %s\n' \
        "$R_HWM_MB" "$RSS_TARGET" "$(verdict "$R_HWM_MB" "$RSS_TARGET")"
    if (( R_THR_MIN < THREADS )); then
        echo "  WARNING: the workload had fewer than $THREADS threads during the window"
    fi
}

echo "memtrial overhead: $THREADS threads x $KIB KiB, ${SECS}s per run, CLK_TCK=$TICK, $(nproc) cores"
echo "binary: $MEMTRIAL"

measure "$INTERVAL" main
report "$RATIO_TARGET"

if [[ -n $FAST_INTERVAL ]]; then
    measure "$FAST_INTERVAL" fast
    report "$FAST_RATIO_TARGET"
fi
echo
echo "(targets: CPU at most ${RATIO_TARGET}x the floor at the main interval, ${FAST_RATIO_TARGET}x at the fast one; < $RSS_TARGET MB VmHWM)"
if (( OVER )); then
    echo "overhead.sh: memtrial's CPU is over its target ratio to the floor (exit 3)" >&2
    exit 3
fi
