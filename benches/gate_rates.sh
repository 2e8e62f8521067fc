#!/usr/bin/env bash
# How often `memtrial gate` fails the job, measured: the exact "Build both" and "Memory gate"
# steps of examples/ci/github-c.yml, repeated GATES times (20) for each of three pull
# requests against the same main — a planted 20% regression (each record 1200 bytes instead
# of 1000), the identical code, and a 2% change (1020 bytes) under the example's 5%
# tolerance — counting the exit codes. Targets (issue 41): the regression exits 3 in at least
# 19 of 20 gates; identical code exits 0 in at least 19 of 20; the 2% change never fails.
#
#   benches/gate_rates.sh                  # 3 × 20 gates of 7 runs each (a few minutes)
#   GATES=50 SCENARIOS="same" benches/gate_rates.sh
#
# Environment: GATES (20), SCENARIOS ("regression same two-percent"), MT (a memtrial binary
# to use instead of building one), OUT (a directory to keep; default a temporary one).
# Prints one line per gate (exit code, the gate's verdict line) and a tally per scenario.
set -euo pipefail

GATES=${GATES:-20}
SCENARIOS=${SCENARIOS:-"regression same two-percent"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

if [ -z "${MT:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet)
    MT="$ROOT/target/release/memtrial"
fi
BIN_DIR=$(mktemp -d)
ln -s "$MT" "$BIN_DIR/memtrial"
export PATH="$BIN_DIR:$PATH"

# The workflow's run steps, but the one that installs memtrial.
STEPS="$OUT/steps.sh"
python3 - "$ROOT/examples/ci/github-c.yml" >"$STEPS" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
for step in doc["jobs"]["memory-gate"]["steps"]:
    if "run" in step and "memtrial" not in step.get("name", ""):
        print(step["run"])
EOF
echo "steps run (from examples/ci/github-c.yml):"
sed 's/^/  | /' "$STEPS"

bytes_of() {
    case "$1" in
        regression) echo 1200 ;;
        same) echo 1000 ;;
        two-percent) echo 1020 ;;
        *) echo "unknown scenario $1" >&2; exit 2 ;;
    esac
}

declare -A TALLY
for scenario in $SCENARIOS; do
    bytes=$(bytes_of "$scenario")
    for i in $(seq 1 "$GATES"); do
        ws="$OUT/$scenario-$i"
        rm -rf "$ws"
        mkdir -p "$ws/main" "$ws/pr"
        cp "$ROOT/examples/ci/c/app.c" "$ws/main/app.c"
        sed "s/#define RECORD_BYTES 1000/#define RECORD_BYTES $bytes/" \
            "$ROOT/examples/ci/c/app.c" >"$ws/pr/app.c"
        set +e
        (cd "$ws" && GITHUB_STEP_SUMMARY="$ws/summary.md" NO_COLOR=1 \
            bash -e "$STEPS" >"$ws/out.txt" 2>"$ws/err.txt")
        code=$?
        set -e
        verdict=$(grep -h '^gate: pr' "$ws/out.txt" | head -1 || true)
        printf '%-12s %2d/%d exit %d  %s\n' "$scenario" "$i" "$GATES" "$code" "$verdict"
        key="$scenario:$code"
        TALLY[$key]=$(( ${TALLY[$key]:-0} + 1 ))
    done
done

echo
echo "exit codes per scenario (3 regression, 4 undecided, 0 pass) over $GATES gates each:"
for scenario in $SCENARIOS; do
    line="  $scenario:"
    for code in 0 1 2 3 4; do
        n=${TALLY[$scenario:$code]:-0}
        [ "$n" -gt 0 ] && line="$line exit $code × $n,"
    done
    echo "${line%,}"
done
rm -rf "$BIN_DIR"
echo "(workspaces kept in $OUT)"
