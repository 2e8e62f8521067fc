#!/usr/bin/env python3
"""The summary scripts/test.sh ends with, made from its log.

  python3 scripts/test_summary.py LOG   print the summary of a test.sh log
  python3 scripts/test_summary.py --check
      summarise every tests/fixtures/ci/*.log and compare with its .summary

test.sh brackets each phase's output in the log with marker lines:
  ==> test.sh phase 'NAME': COMMAND
  ==> test.sh phase 'NAME' ended: exit STATUS after SECONDSs
  ==> test.sh phase 'NAME' not run
The summary names each phase with its time and the counts of its `test result:` lines; for
a failed phase, its failing tests with their first panic line (at most MAX_FAILURES), else
cargo's first error lines (a compile error), else the phase's last lines (a failed set-up);
then the log's path, and last `<passed> passed, <failed> failed` over the whole run.
"""
import difflib
import re
import sys
from pathlib import Path

MAX_FAILURES = 8
ERROR_LINES = 10
TAIL_LINES = 10
WIDTH = 200

START = re.compile(r"^==> test\.sh phase '(.+)': ")
END = re.compile(r"^==> test\.sh phase '(.+)' ended: exit (\d+) after (\d+)s$")
NOT_RUN = re.compile(r"^==> test\.sh phase '(.+)' not run$")
RESULT = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored;")
FAILED = re.compile(r"^test (.+?)(?: - should panic)? \.\.\. FAILED$")
BLOCK = re.compile(r"^---- (.+) std(?:out|err) ----$")
PANIC = re.compile(r"^thread '(.*)'(?: \(\d+\))? panicked at (.+):$")
ERROR = re.compile(r"^error(\[E\d+\])?: ")
RERUN = re.compile(r"^error: test failed, to rerun pass ")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class Phase:
    def __init__(self, name):
        self.name = name
        self.status = None  # exit status; None: not run or did not finish
        self.seconds = None
        self.ran = False
        self.lines = []


def phases_of(lines):
    phases, current = [], None
    for line in lines:
        if m := END.match(line):
            if current and current.name == m[1]:
                current.status, current.seconds = int(m[2]), int(m[3])
            current = None
        elif m := NOT_RUN.match(line):
            phases.append(Phase(m[1]))
            current = None
        elif m := START.match(line):
            current = Phase(m[1])
            current.ran = True
            phases.append(current)
        elif current:
            current.lines.append(line)
    return phases


def counts(phase):
    found = [tuple(map(int, m.groups())) for m in map(RESULT.search, phase.lines) if m]
    return [sum(c) for c in zip(*found)] if found else None


def failures(lines):
    """[(a failing test's name, its first panic line or its output's first line)]"""
    listed, failed_lines, blocks = [], [], {}
    block, in_list = None, False
    for line in lines:
        if line == "failures:":
            block, in_list = None, True
        elif m := BLOCK.match(line):
            block, in_list = blocks.setdefault(m[1], []), False
        elif in_list and line.startswith("    "):
            listed.append(line.strip())
        elif line.startswith("test result:"):
            block, in_list = None, False
        elif m := FAILED.match(line):
            failed_lines.append(m[1])
        elif block is not None:
            block.append(line)
    names = dict.fromkeys(listed or failed_lines)
    return [(name, first_panic(blocks.get(name, []), name, lines)) for name in names]


def first_panic(block, name, lines):
    """`at FILE:LINE:COL: MESSAGE` from the test's output, else from the whole phase (a run
    without capture), else the first line of the test's output."""
    for source, thread in ((block, None), (lines, name)):
        for i, line in enumerate(source):
            if (m := PANIC.match(line)) and thread in (None, m[1]):
                message = next((l.strip() for l in source[i + 1:i + 3] if l.strip()), "")
                return f"at {m[2]}: {message}" if message else f"at {m[2]}"
    return next((l.strip() for l in block if l.strip()), "")


def first_errors(lines):
    """cargo's first error with its context (up to a blank line), then the later errors'
    first lines, and a `Caused by:` with its line (a test binary that crashed)."""
    shown, context = [], False
    for line in lines:
        if ERROR.match(line) or line == "Caused by:":
            context = not shown or line == "Caused by:"
            shown.append(line)
        elif context and line.strip():
            shown.append(line)
        else:
            context = False
    return shown[:ERROR_LINES]


def duration(seconds):
    if seconds is None:
        return "?"
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02}m{s:02}s" if h else f"{m}m{s:02}s" if m else f"{s}s"


def clip(line):
    return line if len(line) <= WIDTH else line[:WIDTH - 1] + "…"


def summary(lines, log):
    phases = phases_of(lines)
    passed = failed = 0
    table, details = [], []
    for p in phases:
        if not p.ran:
            state = "not run"
        elif p.status is None:
            state = "did not finish"
        else:
            state = "ok" if p.status == 0 else f"FAILED ({p.status})"
        c = counts(p)
        if c:
            passed, failed = passed + c[0], failed + c[1]
        table.append((p.name, state, duration(p.seconds) if p.ran else "",
                      f"{c[0]} passed, {c[1]} failed, {c[2]} ignored" if c else ""))
        if p.ran and p.status != 0:
            details += failure_details(p)
    ok = phases and all(p.status == 0 for p in phases)
    total = sum(p.seconds or 0 for p in phases)
    out = [f"==> test.sh summary: {'passed' if ok else 'FAILED'} after {duration(total)}"]
    if not phases:
        out.append(f"  no test.sh phases in {log}")
    w = [max((len(row[i]) for row in table), default=0) for i in range(3)]
    for name, state, time, count in table:
        out.append(f"  {name:<{w[0]}}  {state:<{w[1]}}  {time:>{w[2]}}  {count}".rstrip())
    out += [clip(line) for line in details]
    out.append(f"log: {log}")
    out.append(f"{passed} passed, {failed} failed")
    return out


def failure_details(p):
    tests = failures(p.lines)
    if tests:
        out = [f"{p.name}: {len(tests)} failed test{'s' if len(tests) > 1 else ''}:"]
        for name, where in tests[:MAX_FAILURES]:
            out += [f"  {name}"] + ([f"    {where}"] if where else [])
        if len(tests) > MAX_FAILURES:
            out.append(f"  and {len(tests) - MAX_FAILURES} more, see the log")
        return out + [f"  {l}" for l in p.lines if RERUN.match(l)][-1:]
    if errors := first_errors(p.lines):
        return [f"{p.name}: the first error lines:"] + [f"  {l}" for l in errors]
    tail = [l for l in p.lines if l.strip()][-TAIL_LINES:]
    return [f"{p.name}: its last lines:" if tail else f"{p.name}: no output"] + [f"  {l}" for l in tail]


def read(path):
    text = Path(path).read_text(errors="replace")
    return [ANSI.sub("", line).rstrip("\r") for line in text.splitlines()]


def check():
    root = Path(__file__).resolve().parent.parent
    logs = sorted((root / "tests/fixtures/ci").glob("*.log"))
    bad = 0
    for log in logs:
        shown = str(log.relative_to(root))
        actual = summary(read(log), shown)
        expected = log.with_suffix(".summary").read_text().splitlines()
        problems = list(difflib.unified_diff(expected, actual, "expected", "actual", lineterm=""))
        if not re.fullmatch(r"\d+ passed, \d+ failed", actual[-1]):
            problems.append(f"last line is not `N passed, N failed`: {actual[-1]}")
        if len(actual) > 30:
            problems.append(f"{len(actual)} lines, more than 30")
        bad += bool(problems)
        print(f"{'FAILED' if problems else 'ok'}: {shown}", *problems, sep="\n")
    print(f"{len(logs) - bad} passed, {bad} failed")
    return 1 if bad or not logs else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print("\n".join(summary(read(sys.argv[1]), sys.argv[1])))
