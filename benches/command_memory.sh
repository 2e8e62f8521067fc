#!/usr/bin/env bash
# What each memtrial command costs in memory on a stated input: its peak RSS. GNU time's %M
# (the kernel's ru_maxrss) for the commands that start no other program; for `run`, the
# record's own note ("memtrial's own cost … peak RSS": VmHWM of memtrial alone, not of the
# workloads it waited for, which ru_maxrss would include); for the exporter, its VmHWM after
# three scrapes. Prints one Markdown table row per command (docs/results.md's table).
#
#   benches/command_memory.sh
#
# Environment: MEMTRIAL (target/release/memtrial), SAMPLES (400000: the big record's, about
# 54 MiB, within import's 64 MiB bound).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MEMTRIAL:-$ROOT/target/release/memtrial}
SAMPLES=${SAMPLES:-400000}

for t in python3 /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "command_memory: needs $t" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "command_memory: build first: cargo build --release" >&2; exit 1; }

DIR=$(mktemp -d)
HOLDER=
EXPORTER=
cleanup() {
    [ -n "$HOLDER" ] && kill "$HOLDER" 2>/dev/null || true
    [ -n "$EXPORTER" ] && kill "$EXPORTER" 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
cd "$DIR"

row() { printf '| %s | %s | %s MiB |\n' "$1" "$2" "$3"; }
mib() { python3 -c "print(f'{$1 / 1024:.1f}')"; }

# Peak RSS (KiB) of BIN ARGS…, which starts no other program (GNU time's %M); fails when
# the command does.
peak() {
    if ! /usr/bin/time -f "%M" -o time.txt "$BIN" "$@" >/dev/null 2>err.txt; then
        echo "command_memory: memtrial $*: $(tail -1 err.txt)" >&2
        exit 1
    fi
    cat time.txt
}

# memtrial's own peak RSS over a run (MiB), from the note of the record FILE.
own_peak() {
    python3 - "$1" <<'EOF'
import json, re, sys
notes = json.load(open(sys.argv[1]))["notes"]
own = [n for n in notes if "memtrial's own cost" in n][0]
print(re.search(r"peak RSS ([0-9.]+) MiB", own).group(1))
EOF
}

echo "| command | input | peak RSS |"
echo "|---|---|---|"

# run: 2 variants × 3 runs of /bin/true, the default probes; memtrial's own peak from its note.
"$BIN" run --db m.db --json small.json --variants glibc,jemalloc --runs 3 --seed 1 \
    --quiet -- /bin/true >/dev/null 2>&1
row '`run` (its own, from the record'"'"'s note)' "/bin/true, 2 variants × 3 runs, default probes" \
    "$(own_peak small.json)"

# run on a workload that samples for a while: 2 s of a 200 MiB fragmenting workload.
"$BIN" run --db m.db --json frag.json --variants glibc,jemalloc --runs 1 --seed 1 \
    --quiet -- "$BIN" workload fragment --threads 4 --seconds 2 >/dev/null 2>&1
row '`run` (its own, from the record'"'"'s note)' "\`workload fragment --threads 4 --seconds 2\`, 2 variants × 1 run" \
    "$(own_peak frag.json)"

SMALL=$(( $(stat -c %s small.json) / 1024 ))
row '`report`' "that database: 2 experiments, 8 runs" "$(mib "$(peak report --db m.db)")"
row '`report --html`' "the same" "$(mib "$(peak report --db m.db --html r.html)")"
row '`report --json -`' "the same" "$(mib "$(peak report --db m.db --json -)")"
row '`list`' "the same" "$(mib "$(peak list --db m.db)")"
row '`import`' "a record of ${SMALL} KiB" "$(mib "$(peak import --db i1.db small.json)")"

python3 "$ROOT/benches/grow_record.py" small.json "$SAMPLES" big.json
BIG=$(( $(stat -c %s big.json) / 1048576 ))
row '`import`' "a record of ${BIG} MiB (${SAMPLES} samples)" "$(mib "$(peak import --db i2.db big.json)")"
row '`report`' "that big record's database" "$(mib "$(peak report --db i2.db)")"

# inspect: a process holding 200 MiB in 4000-byte blocks, every other one freed.
python3 -c '
import time
keep = [bytearray(4000) for _ in range(50000)]
del keep[::2]
time.sleep(60)
' &
HOLDER=$!
sleep 2
row '`inspect PID`' "a Python process holding 200 MiB, half of it freed in 4000-byte holes" \
    "$(mib "$(peak inspect "$HOLDER")")"

# exporter: its own VmHWM after 3 scrapes of the processes above.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" exporter --listen "127.0.0.1:$PORT" --match python3 >/dev/null 2>&1 &
EXPORTER=$!
for _ in 1 2 3; do
    sleep 1
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/metrics').read()" \
        2>/dev/null || true
done
HWM=$(awk '/VmHWM/ {print $2}' "/proc/$EXPORTER/status")
row '`exporter` (its own VmHWM after 3 scrapes)' "the Python process above (\`--match python3\`)" "$(mib "$HWM")"
