#!/usr/bin/env bash
# Sets up everything the tests need (scripts/setup-tests.sh, which runs scripts/setup.sh) and
# runs the whole test suite: first every test in parallel, then the measurement-sensitive
# tests marked #[ignore] one at a time, alone on the machine (the demo's claim that glibc has
# the largest footprint is about a quiet 2-core machine, not one shared with twenty other
# tests). MEMTRIAL_TEST_STRICT=1: a test whose package or capability is missing fails
# instead of skipping, so the suite cannot pass by skipping.
# Everything is shown as it comes and kept in target/test-logs/test-<UTC time>.log; the last
# lines are a summary (scripts/test_summary.py): each phase's time and counts, the failing
# tests with their first panic line, the log's path, and last `<P> passed, <F> failed`.
# A phase runs only if the ones before it passed; the exit status is the failed one's.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/test-logs
log="$PWD/target/test-logs/test-$(date -u +%Y%m%dT%H%M%SZ).log"
: >"$log"
say() { echo "==> test.sh $*" | tee -a "$log"; }

# phase NAME COMMAND...: runs COMMAND (unless a phase before failed), its output shown and
# logged between the markers scripts/test_summary.py reads.
status=0
phase() {
  local name=$1 start=$SECONDS
  shift
  if ((status != 0)); then
    say "phase '$name' not run"
    return
  fi
  say "phase '$name': $*"
  # Into the log, shown from there as it grows until the command ends: a process it left
  # running with its output (a daemon, an orphan) cannot hold the suite open as a pipe's
  # writer would hold tee.
  local from pid
  from=$(($(stat -c %s "$log") + 1))
  "$@" >>"$log" 2>&1 &
  pid=$!
  trap 'kill -TERM "$pid" 2>/dev/null' INT TERM
  tail -c +"$from" --pid="$pid" -f "$log" || true
  if wait "$pid"; then status=0; else status=$?; fi
  trap - INT TERM
  say "phase '$name' ended: exit $status after $((SECONDS - start))s"
}

say "full log: $log"
phase set-up ./scripts/setup-tests.sh
export MEMTRIAL_TEST_STRICT=1
phase 'parallel tests' cargo test --release --locked
phase 'measurement tests' cargo test --release --locked --test it -- --ignored --test-threads=1
summary=$(python3 scripts/test_summary.py "$log") || summary="(no summary: scripts/test_summary.py failed; the log: $log)"
printf '%s\n' "$summary" | tee -a "$log"
exit "$status"
