#!/usr/bin/env python3
"""The suite survives its own killed runs (issue 48): a proof script, not a test.

    python3 scripts/kill_suite.py [--seed S] [--parallel-after S]
                                  [--measurement-test NAME] [--measurement-after S]
                                  [--rerun CMD] [--keep]          # as root, from the repo
    python3 scripts/kill_suite.py --check WORKDIR/before.json
    python3 scripts/kill_suite.py --before WORKDIR/before.json --skip-parallel-kill ...

CI starts right after the contributor's own processes were killed, on the same machine, and
meets whatever they left. This does that to the suite itself, as CI runs it: a fresh clone
of HEAD with a read-only copy of ../shared beside it, `bash .ci/run` with CI=true, no
standard input, in a session of its own. It

  1. runs the clone's set-up (scripts/setup-tests.sh, as the suite's first phase does), then
     takes the machine's state (below): what set-up installs and keeps (Debian's packages
     and the directories their scripts make, the tests' venv, gems, the VM and cluster
     builds) is the machine's, as CI's machine has it when its tests begin; only what the
     suite's runs leave is judged;
  2. starts the suite and SIGKILLs its whole process group --parallel-after seconds after
     the parallel phase's first test binary started (default: random, 60-600 s; the phase's
     tests take about 10 min), and prints what the kill left;
  3. starts it again in the same clone and SIGKILLs it --measurement-after seconds (default:
     random, 20-150 s) after --measurement-test began in the measurement phase (default:
     a random one of them; a substring of its name), and prints what that left;
  4. runs the suite a third time to its end, or --rerun CMD (a shell command run from the
     repo, such as `../shared/ci-local`, so that a fresh clone meets the debris): it must be
     green;
  5. takes the state again: nothing may be left that was not there in step 1. That state is
     kept in the run's directory as before.json: --check compares the machine with it again,
     and --before starts another run from it (its leftovers are judged too; with
     --skip-parallel-kill that run begins at step 3, after an earlier one's step 2).

The state: processes started since step 1 that descend from no process that ran before it
(orphans of the suite: workloads, servers, a VM, a cluster's components), cgroup
directories, mounts, network namespaces and links, iptables rules, the sysctls k8s.sh
changes, loop devices, and the entries of /tmp, /var/tmp, /dev/shm, /run, /var/lib, /etc,
/opt and /var/log, and the host paths a cluster writes. What the earlier steps left is
expected, and printed for the reader; only step 5 is judged. Entries of /tmp whose name is
made at random (tempfile's `.tmpXXXXXX`, mktemp's) cannot collide with a later run: they
are listed apart and not judged.

Exit status: 0 when the last run is green and nothing is left, 1 otherwise, 2 when the
script itself could not run. The whole takes about as long as three runs of the suite
(60-90 min on 2 cores).
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP_DIRS = ["/tmp", "/var/tmp", "/dev/shm", "/run", "/var/lib", "/etc", "/opt", "/var/log"]
# What a cluster writes on the host (k8s.sh's HOST_PATHS) and what an interrupted apt leaves.
FIXED_PATHS = ["/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd",
               "/run/netns", "/var/lib/cni", "/usr/libexec/kubernetes", "/etc/cni", "/opt/cni",
               "/opt/containerd", "/var/lib/containerd", "/etc/kubernetes",
               "/var/lib/memtrial-k8s", "/usr/sbin/policy-rc.d", "/var/lib/dpkg/lock-frontend"]
SYSCTLS = ["vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
           "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward"]
# Names made at random by the temp-file makers' defaults: Rust's tempfile (.tmpXXXXXX),
# mktemp without a template (tmp.XXXXXXXXXX), Python's tempfile (tmpXXXXXXXX). A name the
# suite's own scripts choose (vmsh.XXXXXX, ...) is judged: its maker should remove it.
RANDOM_NAME = re.compile(r"^(\.tmp[A-Za-z0-9]{6}|tmp\.[A-Za-z0-9]{10}|tmp[a-z0-9_]{8})$")
# memtrial's own directory of the files it hands to workloads (src/probe/files.rs): each is
# named by a hash of its content, written whole (a temporary file renamed), and used by a
# later run only when it holds exactly that run's bytes. Kept by design, it cannot mislead
# a later run, killed or not.
MEMTRIAL_FILES = re.compile(r"^/tmp/memtrial-\d+$")
# iptables' built-in chains: their policy lines are there before any run.
BUILTIN_CHAINS = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


def say(msg):
    print(f"==> kill_suite {time.strftime('%H:%M:%S')} {msg}", flush=True)


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def processes():
    """{pid: (start time, ppid, text)} of every user-space process."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        stat = read(f"/proc/{d}/stat")
        cmd = read(f"/proc/{d}/cmdline", "rb")
        if stat is None or cmd is None:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()
        state, ppid, start = rest[0], int(rest[1]), int(rest[19])
        if ppid == 2 or int(d) == 2 or state == "Z":
            continue  # kernel threads, zombies
        text = cmd.replace(b"\0", b" ").decode(errors="replace").strip() or f"[{comm}]"
        found[int(d)] = (start, ppid, f"{d} {comm}: {text[:160]}")
    return found


def cgroups():
    found = set()
    base = "/sys/fs/cgroup"
    for top, dirs, _ in os.walk(base):
        if top[len(base):].count("/") >= 7:
            dirs[:] = []
        found.add(top)
    return found


def run_out(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def state(own):
    """The machine's state: {kind: set of entries}; own: directories of this script's own."""
    s = {}
    procs = processes()
    s["_procs"] = procs
    s["cgroup"] = cgroups()
    s["mount"] = set()
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        r = right.split()
        s["mount"].add(f"{f[4]} ({r[0] if r else '?'} {r[1] if len(r) > 1 else ''})")
    s["netns"] = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    s["link"] = {ln.split(":")[1].strip().split("@")[0]
                 for ln in run_out(["ip", "-o", "link"]).splitlines() if ":" in ln}
    s["iptables"] = set()
    for line in run_out(["iptables-save"]).splitlines():
        chain = line[1:].split(" ", 1)[0] if line.startswith(":") else None
        if line.startswith("-A") or (chain and chain not in BUILTIN_CHAINS):
            s["iptables"].add(re.sub(r"\[\d+:\d+\]", "", line).strip())
    s["sysctl"] = {f"{k}={(read('/proc/sys/' + k.replace('.', '/')) or '?').strip()}"
                   for k in SYSCTLS}
    s["loop"] = {ln.split(":")[0] + " " + ln.rsplit("(", 1)[-1].rstrip(")")
                 for ln in run_out(["losetup", "-a"]).splitlines() if ln}
    s["path"] = set()
    for d in TOP_DIRS:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            if any(p == o or p.startswith(o + "/") for o in own) or n.startswith("ci-local."):
                continue
            s["path"].add(p)
    s["path"] |= {p for p in FIXED_PATHS if os.path.lexists(p)}
    return s


def orphans(before, now, mine):
    """Processes of `now` not in `before` that descend from no process of `before` but
    PID 1, and not from `mine`."""
    procs = now["_procs"]
    old = {pid for pid, (start, _, _) in procs.items()
           if pid in before["_procs"] and before["_procs"][pid][0] == start}
    left = []
    for pid, (_, ppid, text) in procs.items():
        if pid in old or pid == os.getpid():
            continue
        p, ok = ppid, True
        seen = set()
        while p not in (0, 1) and p not in seen:
            seen.add(p)
            if p in old or p == mine:
                ok = False
                break
            p = procs[p][1] if p in procs else 0
        if ok:
            left.append(text)
    return sorted(left)


def difference(before, now, mine=None):
    """{kind: sorted entries of `now` not in `before`} and random-named /tmp entries apart."""
    diff = {"process": orphans(before, now, mine)}
    for k in before:
        if k.startswith("_"):
            continue
        diff[k] = sorted(now[k] - before[k])
    rnd = [p for p in diff["path"] if os.path.dirname(p) in ("/tmp", "/var/tmp", "/dev/shm")
           and RANDOM_NAME.match(os.path.basename(p))]
    files = [p for p in diff["path"] if MEMTRIAL_FILES.match(p)]
    diff["path"] = [p for p in diff["path"] if p not in rnd and p not in files]
    rnd += [f"{p} (memtrial's files, named by content)" for p in files]
    # memtrial's base group beside its caller's own (`<own group>/memtrial`), made by the
    # first run as root and kept for the next ones: empty, it holds nothing of a run.
    base = [c for c in diff["cgroup"] if os.path.basename(c) == "memtrial"
            and not any(d.startswith(c + "/") for d in diff["cgroup"])
            and not (read(os.path.join(c, "cgroup.procs")) or "").strip()]
    diff["cgroup"] = [c for c in diff["cgroup"] if c not in base]
    rnd += [f"{c} (memtrial's base group, empty)" for c in base]
    gone = {k: sorted(before[k] - now[k]) for k in ("sysctl",)}
    return diff, rnd, gone


def report(title, diff, rnd, gone):
    n = sum(len(v) for v in diff.values())
    say(f"{title}: {n} entries new since the start" + (":" if n else ""))
    for k, v in diff.items():
        for e in v[:40]:
            print(f"    {k:9} {e}")
        if len(v) > 40:
            print(f"    {k:9} ... and {len(v) - 40} more")
    for e in gone.get("sysctl", []):
        print(f"    {'sysctl':9} (was {e})")
    if rnd:
        print(f"    and {len(rnd)} not judged: random-named entries under /tmp (they cannot "
              "collide with a later run), memtrial's directory of files named by content, "
              "and memtrial's empty base groups: "
              + " ".join(rnd[:12]) + (" ..." if len(rnd) > 12 else ""))
    return n


def save(st, path):
    with open(path, "w") as f:
        json.dump({k: (sorted(v) if isinstance(v, set) else {str(p): list(e) for p, e in v.items()})
                   for k, v in st.items()}, f)


def load(path):
    with open(path) as f:
        d = json.load(f)
    return {k: ({int(p): tuple(e) for p, e in v.items()} if k == "_procs" else set(v))
            for k, v in d.items()}


def wait_for(log, pattern, proc, limit):
    """Waits until `pattern` matches a line of `log`; returns the match, or None when the
    suite ended or `limit` seconds passed."""
    rx = re.compile(pattern, re.M)
    end = time.monotonic() + limit
    while time.monotonic() < end:
        m = rx.search(read(log) or "")
        if m:
            return m
        if proc.poll() is not None:
            return None
        time.sleep(2)
    return None


def set_up_state(clone, work, own):
    """Runs the clone's set-up as the suite's first phase would, then takes the state; None
    when set-up failed (said, with its log's last lines)."""
    log = os.path.join(work, "setup.log")
    say(f"set-up first: what it installs is the machine's, not a run's (log {log})")
    t = time.monotonic()
    with open(log, "w") as out:
        rc = subprocess.run(["bash", "scripts/setup-tests.sh"], cwd=clone,
                            env=dict(os.environ, CI="true"), stdin=subprocess.DEVNULL,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True).returncode
    if rc != 0:
        say(f"set-up failed (exit {rc}): the suite's runs were not started")
        print("\n".join((read(log) or "").splitlines()[-12:]))
        return None
    say(f"set-up done in {time.monotonic() - t:.0f}s; the state before is taken now")
    return state(own)


def start_suite(clone, log):
    env = dict(os.environ, CI="true")
    out = open(log, "w")
    return subprocess.Popen(["bash", ".ci/run"], cwd=clone, env=env, stdin=subprocess.DEVNULL,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    time.sleep(5)  # what the kernel tears down by itself (pipes, a dying group) goes first


def parallel_kill(clone, log1, after1, before, own):
    """Run 1: the suite SIGKILLed `after1` seconds after its first test binary started.
    None when done, else the exit status."""
    say(f"run 1: the suite, killed {after1:.0f}s into its parallel phase (log {log1})")
    p = start_suite(clone, log1)
    # The phase's first test binary runs once its build is done (3-5 min).
    if not wait_for(log1, r"^==> test\.sh phase 'parallel tests':(.|\n)*^\s+Running ", p, 3600):
        say(f"run 1 ended (exit {p.poll()}) before its parallel phase: see {log1}")
        return 2
    time.sleep(after1)
    if p.poll() is not None:
        say(f"run 1 ended (exit {p.returncode}) before the kill: choose a shorter --parallel-after")
        return 2
    last = [ln for ln in (read(log1) or "").splitlines() if ln.startswith("test ")][-1:]
    kill_group(p)
    say(f"run 1 SIGKILLed; its last test line: {last[0] if last else '(none yet)'}")
    report("left by the kill in the parallel phase", *difference(before, state(own)))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--parallel-after", type=float, default=None,
                    help="seconds after the parallel phase's first test binary started, for the first kill (default random 60-600)")
    ap.add_argument("--measurement-test", default=None,
                    help="the second kill falls in the measurement test whose name has this (default random)")
    ap.add_argument("--measurement-after", type=float, default=None,
                    help="seconds into that test (default random 20-150)")
    ap.add_argument("--rerun", default=None,
                    help="shell command for the last, green run, run from the repo (default: the suite in the clone)")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its logs")
    ap.add_argument("--before", metavar="BEFORE_JSON",
                    help="the state before is this earlier run's (its before.json): its leftovers are judged too")
    ap.add_argument("--work", metavar="DIR",
                    help="an earlier run's directory (--keep): its clone, at HEAD now, and its build are used again")
    ap.add_argument("--skip-parallel-kill", action="store_true",
                    help="no run 1 (an earlier run, named by --before, was killed in its parallel phase)")
    ap.add_argument("--check", metavar="BEFORE_JSON",
                    help="only compare the machine now with the state a run saved (its before.json)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("kill_suite: run as root (the suite is)", file=sys.stderr)
        return 2
    if a.check:
        own = [os.path.dirname(os.path.abspath(a.check))]
        return 1 if report("left now", *difference(load(a.check), state(own))) else 0
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    after1 = a.parallel_after if a.parallel_after is not None else rng.uniform(60, 600)
    after2 = a.measurement_after if a.measurement_after is not None else rng.uniform(20, 150)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    if a.work:
        work = os.path.abspath(a.work)
    else:
        work = tempfile.mkdtemp(prefix="kill-suite.")
        os.chmod(work, 0o755)
    clone = os.path.join(work, "main")
    say(f"seed {seed}; HEAD {head[:10]}; in {work}")
    own = [work] + ([os.path.dirname(os.path.abspath(a.before))] if a.before else [])
    shared = os.path.join(work, "shared")
    if a.work:
        # The clone of an earlier run, its build kept: only the commit changes.
        subprocess.run(["git", "-C", clone, "fetch", "-q", "origin"], check=True)
        subprocess.run(["git", "-C", clone, "checkout", "-q", head], check=True)
    else:
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        subprocess.run(["git", "-C", clone, "checkout", "-q", head], check=True)
        shutil.copytree(os.path.join(ROOT, "..", "shared"), shared)
        subprocess.run(["chmod", "-R", "a-w", shared], check=True)
    if a.before:
        before = load(a.before)
        say(f"the state before is {a.before}'s")
    else:
        before = set_up_state(clone, work, own)
        if before is None:
            return 2
    save(before, os.path.join(work, "before.json"))
    t0 = time.monotonic()

    # 1. Killed in the parallel phase.
    tag = time.strftime("%H%M%S")
    log1 = os.path.join(work, f"run1-{tag}.log")
    if a.skip_parallel_kill:
        say("run 1 skipped (--skip-parallel-kill)")
    else:
        r = parallel_kill(clone, log1, after1, before, own)
        if r is not None:
            return r


    # 2. Killed in the measurement phase.
    log2 = os.path.join(work, f"run2-{tag}.log")
    p = start_suite(clone, log2)
    if not wait_for(log2, r"^==> test\.sh phase 'measurement tests':", p, 3600):
        say(f"run 2 ended (exit {p.poll()}) before its measurement phase: see {log2}")
        print("\n".join((read(log2) or "").splitlines()[-12:]))
        return 1
    if a.measurement_test is None:
        lst = subprocess.run(["cargo", "test", "--release", "--locked", "--test", "it", "--",
                              "--ignored", "--list"], cwd=clone, capture_output=True, text=True)
        names = [ln.split(": ")[0] for ln in lst.stdout.splitlines() if ln.endswith(": test")]
        a.measurement_test = rng.choice(names) if names else ""
    say(f"run 2: the suite, killed {after2:.0f}s into the measurement test "
        f"'{a.measurement_test}' (log {log2})")
    m = wait_for(log2, r"^test \S*" + re.escape(a.measurement_test) + r"\S* \.\.\. ", p, 7200)
    if not m:
        say(f"run 2 ended (exit {p.poll()}) before that test began: see {log2}")
        return 1
    time.sleep(after2)
    kill_group(p)
    say(f"run 2 SIGKILLed in {m.group(0).strip()}")
    report("left by the kill in the measurement phase", *difference(before, state(own)))

    # 3. The run that must be green.
    if a.rerun:
        say(f"run 3: {a.rerun} (from {ROOT})")
        r = subprocess.run(["bash", "-c", a.rerun], cwd=ROOT, stdin=subprocess.DEVNULL,
                           start_new_session=True)
        rc = r.returncode
    else:
        log3 = os.path.join(work, f"run3-{tag}.log")
        say(f"run 3: the suite to its end (log {log3})")
        p = start_suite(clone, log3)
        rc = p.wait()
        print("\n".join((read(log3) or "").splitlines()[-12:]))
    say(f"run 3 ended: exit {rc} ({'green' if rc == 0 else 'RED'})")
    time.sleep(5)
    n = report("left after the last run", *difference(before, state(own)))
    say(f"all three runs: {(time.monotonic() - t0) / 60:.0f} min; seed {seed}")
    if not a.keep:
        subprocess.run(["chmod", "-R", "u+w", shared])
        shutil.rmtree(os.path.join(clone, "target"), ignore_errors=True)
        say(f"the clone's build removed; logs kept in {work}")
    ok = rc == 0 and n == 0
    say("PASSED: green after two kills, nothing left" if ok else
        f"FAILED: last run exit {rc}, {n} entries left")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
