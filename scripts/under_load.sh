#!/usr/bin/env bash
# Runs tests again and again beside busy loops, as a loaded CI machine would run them, and
# counts each test's failures (issue 48: a test that asserts a measured figure must hold
# under load, or state its allowance, or be a benchmark).
#
#   scripts/under_load.sh [-n ROUNDS] [-b BUSY] [-f FILE] [TEST...]     # as root, from the repo
#
# Each of ROUNDS (default 5) runs the named tests, exact names as `cargo test` lists them,
# in one `cargo test --release --locked` as the suite's parallel phase does, beside BUSY
# (default 2) shell loops that each keep a CPU busy. FILE (default
# scripts/measured_tests.txt) names tests one per line (# comments) when none are given.
# Prints per round its time and failures, then each failing test's count and first panic
# line; the logs stay in target/under-load/. Exit status: 0 when no test failed, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5 busy=2 file=scripts/measured_tests.txt
while getopts n:b:f: o; do
  case $o in
    n) rounds=$OPTARG ;;
    b) busy=$OPTARG ;;
    f) file=$OPTARG ;;
    *) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
tests=("$@")
if ((${#tests[@]} == 0)); then
  mapfile -t tests < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$file" | grep -v '^$')
fi
((${#tests[@]})) || { echo "under_load: no tests named" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "under_load: -n $rounds: rounds must be a positive whole number" >&2; exit 2; }
[[ $busy =~ ^[0-9]+$ ]] || { echo "under_load: -b $busy: busy loops must be a whole number" >&2; exit 2; }

out=target/under-load/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
cargo test --release --locked --no-run >"$out/build.log" 2>&1 ||
  { tail -n 20 "$out/build.log" >&2; echo "under_load: the build failed ($out/build.log)" >&2; exit 2; }
loops=()
stop_loops() { ((${#loops[@]})) && kill "${loops[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_loops EXIT
for ((i = 0; i < busy; i++)); do
  sh -c 'while :; do :; done' &
  loops+=($!)
done
echo "under_load: ${#tests[@]} tests, $rounds rounds, beside $busy busy loops; logs in $out"
export MEMTRIAL_TEST_STRICT=1
for ((r = 1; r <= rounds; r++)); do
  t0=$SECONDS
  cargo test --release --locked --no-fail-fast -- --exact "${tests[@]}" >"$out/round-$r.log" 2>&1 || true
  ran=$(grep -cE '^test .* \.\.\. (ok|FAILED)$' "$out/round-$r.log" || true)
  failed=$(grep -E '^test .* \.\.\. FAILED$' "$out/round-$r.log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' || true)
  echo "round $r: $ran ran in $((SECONDS - t0))s, $(printf '%s' "$failed" | grep -c . || true) failed${failed:+: $(echo $failed)}"
done
stop_loops
trap - EXIT
fails=$(cat "$out"/round-*.log | grep -E '^test .* \.\.\. FAILED$' | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | sort | uniq -c | sort -rn || true)
if [[ -z $fails ]]; then
  echo "under_load: 0 failures in $rounds rounds of ${#tests[@]} tests"
  exit 0
fi
echo "under_load: failures in $rounds rounds:"
while read -r n t; do
  first=$(grep -h -A3 -E "^---- $t stdout ----" "$out"/round-*.log | grep -m1 -E "panicked at|assert" || true)
  echo "  $n× $t: ${first:-see the logs}"
done <<<"$fails"
exit 1
