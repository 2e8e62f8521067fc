#!/usr/bin/env python3
"""Fault injection for memtrial (issue 13): a script like the benchmarks, not a test.

    python3 scripts/faults.py [N] [--memtrial PATH] [--seed S] [--signals SIG,...]
                              [--stop-seconds S]                # as root, from the repo

Runs N faults (default 50). Each fault starts `memtrial run` on one of four workloads in a
fresh directory with its own --db, and sends memtrial one signal (SIGINT, SIGTERM, SIGHUP,
SIGQUIT, SIGKILL, or SIGSTOP followed by SIGCONT --stop-seconds later: 2 s by default) at a
random moment of its run (--signals picks among fewer):

  batch      two variants x 3 runs of a short shell loop
  daemon     a workload that double-forks a child that leaves its process group and
             ignores SIGTERM
  forkbomb   a fork bomb under --pids-limit 24, stopped by --timeout 2s
  server     python3 -m http.server on 127.0.0.1:{port}, loaded with --url for 1 s

After each fault it prints what was left (processes of the workload still alive, memtrial
cgroups of the dead memtrial under the cgroup mounts), lost runs (runs that ended in
memtrial's log but are not in the store), and what `run --resume` did (runs it added
against the runs that were missing, and leftovers after it: the next start cleans what a
SIGKILL left). A summary table ends the output. A stopped memtrial must finish as if it had
not been stopped: for SIGSTOP faults a second table gives the stored runs' statuses, their
longest wall time (the workload's own clock: a stop must not lengthen it) and how many runs
say they were disturbed. Traffic goes only to 127.0.0.1; every
memtrial is bounded in time (a hung one is killed and counted). Exit status 0 unless the
script itself broke; the figures are the result.

    python3 scripts/faults.py --writers W [--rounds R] [--memtrial PATH] [--seed S]

Concurrent writers (issue 19): each of R rounds (default 5) starts W memtrials (default 4)
at once on one new database (`batch`, 6 slots each), SIGKILLs a random half of them at a
random moment, lets the others finish, then resumes every experiment left unfinished with
two `run --resume ID` at once. It prints, per round and in sum: memtrials that failed
(not killed, exit not 0), and per experiment after the resumes: slots of the schedule with
no run (lost), runs of a slot stored twice (duplicated), experiments not complete.

    python3 scripts/faults.py --pidns R [--memtrial PATH] [--seed S]

PID namespaces (issue 38): each of R rounds (default 5) starts memtrials on the host and in
PID namespaces of their own (`unshare --pid --fork --mount-proc`, as a container that shares
the host's cgroup tree) so that they overlap at random moments: one long run each side, and
a third memtrial on a random side started while both run. It prints the runs that did not
end ok (a memtrial that took the other side's live group for stale SIGKILLs its workload),
memtrials that failed, groups left behind and what the notes said was removed.

    python3 scripts/faults.py --soaks R [--memtrial PATH] [--seed S]

Soaks under fire (issue 38): each of R rounds (default 3) runs three soaks of two variants
(tests/fixtures/servers/server.py) with random timings:
  resume race    a soak SIGKILLed at a random moment, then two `soak --resume` at once:
                 how many ran it (must be 1) and were refused (1, naming the owner), its
                 segments (2), windows whose time overlaps another's of the same variant
                 (stored twice: 0), instances and groups left;
  dead servers   every server crashes after a random number of requests: the exit (1),
                 the stored status (failed), how long the soak went on after, the errors
                 per variant against the requests due, "fell behind" events (0);
  start fails    the server exits at once: the exit (2) and the stored status (failed).
"""

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGKILL", "SIGSTOP"]
TAG_VAR = "MEMTRIAL_FAULT_TAG"

WORKLOADS = {
    # name: (memtrial arguments before --, the command, latest moment for the signal in s)
    "batch": (
        ["--runs", "3", "--variants", "glibc,arena2"],
        ["sh", "-c", "i=0; while [ $i -lt 4 ]; do sleep 0.1; i=$((i+1)); done"],
        2.8,
    ),
    "daemon": (
        ["--runs", "2", "--variants", "glibc"],
        ["sh", "-c", '( trap "" TERM; setsid sleep 30 & ); sleep 0.8'],
        2.5,
    ),
    "forkbomb": (
        ["--runs", "2", "--variants", "glibc", "--pids-limit", "24", "--timeout", "2s"],
        # Forks until the limit, and keeps trying (a shell's bomb dies at its first failed
        # fork and the run would end before any signal): held until --timeout.
        ["python3", "-c", "import os, time\nwhile True:\n    try:\n        if os.fork() == 0:\n"
         "            time.sleep(30)\n            os._exit(0)\n    except OSError:\n"
         "        time.sleep(0.01)\n"],
        4.0,
    ),
    "server": (
        ["--runs", "2", "--variants", "glibc", "--url", "http://127.0.0.1:{port}/",
         "--duration", "1s", "--cooldown", "200ms", "--connections", "2",
         "--ready-timeout", "10s"],
        ["python3", "-m", "http.server", "--bind", "127.0.0.1", "{port}"],
        3.5,
    ),
}


def tagged_processes(tag):
    """PIDs whose environment carries the fault's tag (memtrial passes it to the workload)."""
    found = []
    needle = f"{TAG_VAR}={tag}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{d}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != b"Z":
            found.append(int(d))
    return found


def cgroup_mounts():
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[:1] in (["cgroup"], ["cgroup2"]):
                mounts.append(left.split()[4])
    return mounts


def memtrial_dirs():
    """Every `memtrial` directory of the cgroup mounts (at most 5 levels down), with the
    names of the directories in it."""
    for m in cgroup_mounts():
        for dirpath, dirnames, _ in os.walk(m):
            if dirpath.count("/") - m.count("/") > 5:
                dirnames[:] = []
                continue
            if os.path.basename(dirpath) == "memtrial":
                yield dirpath, list(dirnames)
                dirnames[:] = []


def memtrial_groups(pid):
    """Run groups of one memtrial (`n<pid namespace>-<pid>-…`, or an older memtrial's
    `<pid>-…`) under any `memtrial` dir of the mounts."""
    return [os.path.join(d, g) for d, groups in memtrial_dirs() for g in groups
            if re.match(rf"^(n\d+-)?{pid}-", g)]


def stored(db):
    """(runs stored, of which interrupted, experiment status) or None without a database."""
    if not os.path.exists(db):
        return None
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        n = con.execute("SELECT count(*) FROM runs").fetchone()[0]
        i = con.execute("SELECT count(*) FROM runs WHERE status = 'interrupted'").fetchone()[0]
        row = con.execute("SELECT status FROM experiments ORDER BY id DESC LIMIT 1").fetchone()
        return n, i, (row[0] if row else None)
    except sqlite3.Error:
        return None
    finally:
        con.close()


def stored_runs(db):
    """(status, wall_seconds, message) of every stored run, or [] without a database."""
    if not os.path.exists(db):
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute("SELECT status, wall_seconds, message FROM runs").fetchall()
    except sqlite3.Error:
        return []
    finally:
        con.close()


def run_bounded(cmd, cwd, env, limit):
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        _, err = p.communicate(timeout=limit)
        return p.returncode, err, False
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return p.returncode, err, True


def kill_all(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def one_fault(i, memtrial, rng, signals, stop_seconds):
    workload = rng.choice(sorted(WORKLOADS))
    sig = rng.choice(signals)
    flags, command, latest = WORKLOADS[workload]
    at = rng.uniform(0.05, latest)
    tag = f"{os.getpid()}-{i}"
    env = dict(os.environ, NO_COLOR="1", **{TAG_VAR: tag})
    out = {"workload": workload, "signal": sig, "at": at}
    with tempfile.TemporaryDirectory(prefix="memtrial-fault-") as tmp:
        db = os.path.join(tmp, "f.db")
        cmd = [memtrial, "--db", db, "run", *flags, "--", *command]
        p = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(at)
        if p.poll() is None:
            p.send_signal(getattr(signal, sig))
            if sig == "SIGSTOP":
                time.sleep(stop_seconds)
                p.send_signal(signal.SIGCONT)
            out["delivered"] = True
        else:
            out["delivered"] = False
        try:
            _, err = p.communicate(timeout=30)
            out["hung"] = False
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            out["hung"] = True
        out["exit"] = p.returncode
        time.sleep(0.3)  # let the kernel reap what memtrial's teardown killed
        leftover_procs = tagged_processes(tag)
        leftover_groups = memtrial_groups(p.pid)
        out["procs_after"] = len(leftover_procs)
        out["groups_after"] = len(leftover_groups)
        m = re.search(r"experiment \d+: (\d+) runs", err)
        total = int(m.group(1)) if m else None
        logged = len(re.findall(r"^\[\s*\d+/\d+\]", err, re.M))
        s = stored(db)
        runs, interrupted = (s[0], s[1]) if s else (0, 0)
        out["lost"] = max(0, logged - runs)
        out["runs"] = stored_runs(db)
        # What resume must add: every slot without a kept (non-interrupted) run.
        missing = (total - (runs - interrupted)) if total is not None and s else None
        out["missing"] = missing
        rc, rerr, rhung = run_bounded([memtrial, "--db", db, "run", "--resume"], tmp,
                                      dict(env, **{TAG_VAR: tag + "-r"}), 60)
        s2 = stored(db)
        if missing is None:
            out["resume"] = "no experiment"
            out["added"] = None
        elif missing == 0:
            out["added"] = 0
            out["resume"] = "nothing to do" if "is complete" in rerr or rc == 0 else f"exit {rc}"
        else:
            kept = runs - interrupted
            out["added"] = (s2[0] - kept) if s2 else None
            ok = rc in (0, 1) and s2 and s2[2] == "complete" and out["added"] == missing
            out["resume"] = "ok" if ok else f"exit {rc}{' hung' if rhung else ''}"
        time.sleep(0.3)
        out["procs_after_resume"] = len(tagged_processes(tag) + tagged_processes(tag + "-r"))
        out["groups_after_resume"] = len(memtrial_groups(p.pid))
        kill_all(tagged_processes(tag) + tagged_processes(tag + "-r"))
    return out


WRITER_FLAGS = ["--runs", "3", "--variants", "glibc,arena2", "--no-probes", "--quiet"]
WRITER_COMMAND = ["sh", "-c", "sleep 0.2"]
WRITER_SLOTS = 6


def slot_figures(db):
    """Per experiment: (id, status, slots without a kept run, runs of a slot stored twice)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        out = []
        for eid, status in con.execute("SELECT id, status FROM experiments ORDER BY id"):
            seqs = [r[0] for r in con.execute(
                "SELECT seq FROM runs WHERE experiment_id = ? AND status != 'interrupted'",
                (eid,))]
            inside = [q for q in seqs if q < WRITER_SLOTS]
            missing = WRITER_SLOTS - len(set(inside))
            duplicated = len(inside) - len(set(inside))
            out.append((eid, status, missing, duplicated))
        return out
    finally:
        con.close()


def writers_round(k, w, memtrial, rng):
    """One round of `--writers`: returns (failed memtrials, killed, per-experiment figures)."""
    env = dict(os.environ, NO_COLOR="1", **{TAG_VAR: f"{os.getpid()}-w{k}"})
    with tempfile.TemporaryDirectory(prefix="memtrial-writers-") as tmp:
        db = os.path.join(tmp, "shared.db")
        cmd = [memtrial, "--db", db, "run", *WRITER_FLAGS, "--", *WRITER_COMMAND]
        procs = [subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for _ in range(w)]
        victims = rng.sample(range(w), w // 2)
        time.sleep(rng.uniform(0.3, 1.5))
        for v in victims:
            if procs[v].poll() is None:
                procs[v].kill()
        failed = []
        for i, p in enumerate(procs):
            try:
                _, err = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
                failed.append("hung")
                continue
            if i not in victims and p.returncode != 0:
                failed.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
        for eid, status, missing, _ in slot_figures(db):
            if status == "complete" and missing == 0:
                continue
            rs = [subprocess.Popen([memtrial, "--db", db, "run", "--resume", str(eid), "--quiet"],
                                   cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True) for _ in range(2)]
            for p in rs:
                try:
                    _, err = p.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    p.kill()
                    _, err = p.communicate()
                    failed.append("resume hung")
                    continue
                if p.returncode != 0:
                    failed.append("resume: " + (err.strip().splitlines() or [""])[-1])
        figures = slot_figures(db)
        kill_all(tagged_processes(env[TAG_VAR]))
    return failed, len(victims), figures


def writers_main(a, rng):
    print(f"--writers {a.writers}: {a.rounds} round(s), {WRITER_SLOTS} slots per experiment, "
          f"memtrial {a.memtrial}")
    print(f"{'round':>5} {'writers':>7} {'killed':>6} {'failed':>6} {'experiments':>11} "
          f"{'lost':>4} {'duplicated':>10} {'not complete':>12}")
    tot = defaultdict(int)
    for k in range(1, a.rounds + 1):
        failed, killed, figures = writers_round(k, a.writers, a.memtrial, rng)
        lost = sum(f[2] for f in figures)
        dup = sum(f[3] for f in figures)
        incomplete = sum(1 for f in figures if f[1] != "complete")
        print(f"{k:>5} {a.writers:>7} {killed:>6} {len(failed):>6} {len(figures):>11} "
              f"{lost:>4} {dup:>10} {incomplete:>12}", flush=True)
        for f in failed:
            print(f"      failed: {f}")
        for key, v in (("killed", killed), ("failed", len(failed)), ("experiments", len(figures)),
                       ("lost", lost), ("duplicated", dup), ("incomplete", incomplete)):
            tot[key] += v
    print(f"{'all':>5} {a.writers * a.rounds:>7} {tot['killed']:>6} {tot['failed']:>6} "
          f"{tot['experiments']:>11} {tot['lost']:>4} {tot['duplicated']:>10} "
          f"{tot['incomplete']:>12}")


def cgroup_names():
    """Every group name under any `memtrial` dir of the mounts."""
    return {g for _, groups in memtrial_dirs() for g in groups if g != "memtrial-self"}


def pidns_round(k, memtrial, rng):
    """One round of `--pidns`: (runs not ok, memtrials failed, groups left, removed notes)."""
    tag = f"{os.getpid()}-p{k}"
    env = dict(os.environ, NO_COLOR="1", **{TAG_VAR: tag})
    before = cgroup_names()
    procs = []
    with tempfile.TemporaryDirectory(prefix="memtrial-pidns-") as tmp:
        def start(name, inner, sleep):
            d = os.path.join(tmp, name)
            os.mkdir(d)
            cmd = [memtrial, "run", "--variants", "glibc", "--runs", "1", "--no-probes",
                   "--json", "out.json", "--", "sleep", f"{sleep:.2f}"]
            if inner:
                cmd = ["unshare", "--pid", "--fork", "--mount-proc"] + cmd
            p = subprocess.Popen(cmd, cwd=d, env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
            procs.append((name, d, p))
        first_inner = rng.random() < 0.5
        start("a", first_inner, rng.uniform(2.0, 4.0))
        time.sleep(rng.uniform(0.2, 1.5))
        start("b", not first_inner, rng.uniform(1.5, 3.0))
        time.sleep(rng.uniform(0.1, 1.0))
        start("c", rng.random() < 0.5, rng.uniform(0.0, 0.5))
        not_ok, failed, removed = 0, [], 0
        for name, d, p in procs:
            try:
                _, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
                failed.append(f"{name}: hung")
                continue
            removed += err.count("removed a cgroup")
            if p.returncode != 0:
                failed.append(f"{name}: exit {p.returncode}: "
                              + (err.strip().splitlines() or [""])[-1])
            try:
                with open(os.path.join(d, "out.json")) as f:
                    doc = json.load(f)
                runs = [r for v in doc.get("variants", []) for r in v.get("runs", [])]
                not_ok += sum(1 for r in runs if r.get("status") != "ok") if runs else 1
            except (OSError, ValueError):
                not_ok += 1
        time.sleep(0.3)
        left = len(cgroup_names() - before)
        kill_all(tagged_processes(tag))
    return not_ok, failed, left, removed


def pidns_main(a, rng):
    print(f"--pidns: {a.pidns} round(s), memtrial {a.memtrial}")
    print(f"{'round':>5} {'runs not ok':>11} {'failed':>6} {'groups left':>11} "
          f"{'removed notes':>13}")
    tot = defaultdict(int)
    for k in range(1, a.pidns + 1):
        not_ok, failed, left, removed = pidns_round(k, a.memtrial, rng)
        print(f"{k:>5} {not_ok:>11} {len(failed):>6} {left:>11} {removed:>13}", flush=True)
        for f in failed:
            print(f"      failed: {f}")
        for key, v in (("not_ok", not_ok), ("failed", len(failed)), ("left", left),
                       ("removed", removed)):
            tot[key] += v
    print(f"{'all':>5} {tot['not_ok']:>11} {tot['failed']:>6} {tot['left']:>11} "
          f"{tot['removed']:>13}")


SERVER = os.path.join(ROOT, "tests/fixtures/servers/server.py")


def soak_cmd(memtrial, db, mode, duration, tag, rate="10"):
    return [memtrial, "--db", db, "soak", "--variants", "glibc,arena2",
            "--url", "http://127.0.0.1:{port}/", "--rate", rate, "--duration", duration,
            "--window", "3s", "--interval", "500ms", "--",
            "python3", SERVER, "{port}", mode, "0", tag]


def soak_db(db):
    """(status, stop reason, segments, overlapping windows, {variant: (errors, due)},
    fell-behind events) of the database's soak 1."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        row = con.execute("SELECT status, stop_reason FROM soaks WHERE id = 1").fetchone()
        if row is None:
            return None
        segs = con.execute("SELECT count(*) FROM soak_segments WHERE soak_id = 1").fetchone()[0]
        by = defaultdict(list)
        figures = defaultdict(lambda: [0, 0])
        for v, a, b, fj in con.execute(
                "SELECT variant, from_t, to_t, figures_json FROM soak_windows WHERE soak_id = 1"):
            by[v].append((a, b))
            f = json.loads(fj)
            figures[v][0] += f.get("errors", 0)
            figures[v][1] += f.get("due") or 0
        overlap = 0
        for ws in by.values():
            ws.sort()
            overlap += sum(1 for p, q in zip(ws, ws[1:]) if q[0] < p[1] - 0.01)
        behind = con.execute("SELECT count(*) FROM soak_events WHERE soak_id = 1 "
                             "AND text LIKE '%fell behind%'").fetchone()[0]
        return row[0], row[1] or "", segs, overlap, dict(figures), behind
    finally:
        con.close()


def soak_round(k, memtrial, rng):
    """One round of `--soaks`: a result per scenario."""
    out = {}
    tag = f"{os.getpid()}-s{k}"
    env = dict(os.environ, NO_COLOR="1", **{TAG_VAR: tag})
    # Resume race.
    with tempfile.TemporaryDirectory(prefix="memtrial-soak-race-") as tmp:
        db = os.path.join(tmp, "s.db")
        p = subprocess.Popen(soak_cmd(memtrial, db, "ok", "20s", tag), cwd=tmp, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(3.0, 8.0))
        p.kill()
        p.wait()
        rs = [subprocess.Popen([memtrial, "--db", db, "soak", "--resume"], cwd=tmp, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
        exits, named = [], 0
        for r in rs:
            try:
                _, err = r.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                r.kill()
                _, err = r.communicate()
            exits.append(r.returncode)
            named += int("is running in another memtrial (PID" in err)
        time.sleep(0.3)
        d = soak_db(db)
        out["race"] = {
            "ran": exits.count(0), "refused": exits.count(2), "named": named,
            "segments": d[2] if d else None, "overlap": d[3] if d else None,
            "procs": len(tagged_processes(tag)), "groups": len(memtrial_groups(p.pid)),
        }
        kill_all(tagged_processes(tag))
    # Dead servers.
    with tempfile.TemporaryDirectory(prefix="memtrial-soak-dead-") as tmp:
        db = os.path.join(tmp, "s.db")
        n = rng.randint(5, 60)
        t0 = time.monotonic()
        rc, _, hung = run_bounded(soak_cmd(memtrial, db, f"crash-after-{n}", "1m", tag),
                                  tmp, env, 120)
        took = time.monotonic() - t0
        d = soak_db(db)
        worst = max(((e, due) for e, due in d[4].values()), default=(0, 0)) if d else (0, 0)
        out["dead"] = {
            "after": n, "exit": rc, "hung": hung, "status": d[0] if d else None,
            "took": took, "errors": worst[0], "due": worst[1], "behind": d[5] if d else None,
        }
        kill_all(tagged_processes(tag))
    # Start fails.
    with tempfile.TemporaryDirectory(prefix="memtrial-soak-start-") as tmp:
        db = os.path.join(tmp, "s.db")
        cmd = soak_cmd(memtrial, db, "ok", "1m", tag)
        cmd = cmd[:cmd.index("--") + 1] + ["sh", "-c", "echo boom >&2; exit 3", "{port}"]
        rc, _, hung = run_bounded(cmd, tmp, env, 60)
        d = soak_db(db)
        out["start"] = {"exit": rc, "status": d[0] if d else None}
    return out


def soaks_main(a, rng):
    print(f"--soaks: {a.soaks} round(s), memtrial {a.memtrial}")
    print(f"{'round':>5} | {'race: ran':>9} {'refused':>7} {'named':>5} {'segs':>4} "
          f"{'overlap':>7} {'left':>4} | {'dead: after':>11} {'exit':>4} {'status':<8} "
          f"{'took s':>6} {'errors/due':>10} {'behind':>6} | {'start: exit':>11} "
          f"{'status':<8}")
    for k in range(1, a.soaks + 1):
        r = soak_round(k, a.memtrial, rng)
        c, d, s0 = r["race"], r["dead"], r["start"]
        print(f"{k:>5} | {c['ran']:>9} {c['refused']:>7} {c['named']:>5} "
              f"{str(c['segments']):>4} {str(c['overlap']):>7} "
              f"{c['procs'] + c['groups']:>4} | {d['after']:>11} "
              f"{str(d['exit']) + ('!' if d['hung'] else ''):>4} {str(d['status']):<8} "
              f"{d['took']:>6.1f} {str(d['errors']) + '/' + str(d['due']):>10} "
              f"{str(d['behind']):>6} | {str(s0['exit']):>11} {str(s0['status']):<8}",
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=50, help="number of faults (default 50)")
    ap.add_argument("--memtrial", default=os.path.join(ROOT, "target/release/memtrial"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--signals", default=",".join(SIGNALS),
                    help="the signals to pick from, comma-separated (default: all)")
    ap.add_argument("--stop-seconds", type=float, default=2.0,
                    help="how long a SIGSTOP fault keeps memtrial stopped (default 2)")
    ap.add_argument("--writers", type=int, default=None,
                    help="concurrent writers on one database instead of signal faults")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of --writers (default 5)")
    ap.add_argument("--pidns", type=int, nargs="?", const=5, default=None,
                    help="memtrials in PID namespaces of their own beside ones on the host")
    ap.add_argument("--soaks", type=int, nargs="?", const=3, default=None,
                    help="soaks killed and resumed twice at once, of dead servers, failing")
    a = ap.parse_args()
    signals = [x.strip() for x in a.signals.split(",") if x.strip()]
    if not signals or any(x not in SIGNALS for x in signals):
        sys.exit(f"faults.py: --signals takes some of {','.join(SIGNALS)}")
    if not 0 < a.stop_seconds <= 30:
        sys.exit("faults.py: --stop-seconds takes more than 0 and at most 30")
    if os.geteuid() != 0:
        sys.exit("faults.py: run as root (memtrial makes a cgroup per run only as root)")
    if not os.access(a.memtrial, os.X_OK):
        sys.exit(f"faults.py: no memtrial at {a.memtrial} (cargo build --release)")
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    if a.writers:
        print(f"seed {seed}")
        writers_main(a, rng)
        return
    if a.pidns:
        print(f"seed {seed}")
        pidns_main(a, rng)
        return
    if a.soaks:
        print(f"seed {seed}")
        soaks_main(a, rng)
        return
    print(f"{a.n} faults, seed {seed}, memtrial {a.memtrial}, signals {','.join(signals)}"
          f"{f', stopped {a.stop_seconds} s' if 'SIGSTOP' in signals else ''}")
    print(f"{'#':>3} {'workload':<9} {'signal':<8} {'at s':>5} {'exit':>5} "
          f"{'procs':>5} {'groups':>6} {'lost':>4} {'missing':>7} {'added':>5} "
          f"{'resume':<14} {'left after resume'}")
    results = []
    for i in range(1, a.n + 1):
        r = one_fault(i, a.memtrial, rng, signals, a.stop_seconds)
        results.append(r)
        note = "" if r["delivered"] else " (ended before the signal)"
        print(f"{i:>3} {r['workload']:<9} {r['signal']:<8} {r['at']:>5.2f} "
              f"{str(r['exit']) + ('!' if r['hung'] else ''):>5} {r['procs_after']:>5} "
              f"{r['groups_after']:>6} {r['lost']:>4} {str(r['missing']):>7} "
              f"{str(r['added']):>5} {r['resume']:<14} "
              f"{r['procs_after_resume']} procs, {r['groups_after_resume']} groups{note}",
              flush=True)
    print()
    print("summary (procs/groups: left right after the fault; after resume: left once the")
    print("next memtrial started; resume ok: added exactly the missing runs)")
    by = defaultdict(list)
    for r in results:
        by[(r["workload"], r["signal"])].append(r)
    print(f"{'workload':<9} {'signal':<8} {'faults':>6} {'hung':>4} {'procs':>5} {'groups':>6} "
          f"{'lost':>4} {'resume ok':>9} {'after resume':>12}")
    keys = sorted(by) + [("all", "")]
    by[("all", "")] = results
    for k in keys:
        rs = by[k]
        resumed = [r for r in rs if r["missing"]]
        ok = sum(1 for r in resumed if r["resume"] == "ok")
        after = sum(r["procs_after_resume"] + r["groups_after_resume"] for r in rs)
        print(f"{k[0]:<9} {k[1]:<8} {len(rs):>6} {sum(r['hung'] for r in rs):>4} "
              f"{sum(r['procs_after'] for r in rs):>5} {sum(r['groups_after'] for r in rs):>6} "
              f"{sum(r['lost'] for r in rs):>4} {f'{ok}/{len(resumed)}':>9} {after:>12}")
    stops = [r for r in results if r["signal"] == "SIGSTOP" and r["delivered"]]
    if stops:
        print()
        print(f"SIGSTOP for {a.stop_seconds} s, then SIGCONT: the stored runs (wall: the longest;")
        print("a stop that lengthened a figure shows here; disturbed: runs whose message says so)")
        print(f"{'workload':<9} {'faults':>6} {'exits':<10} {'runs':>4} {'statuses':<24} "
              f"{'wall max s':>10} {'disturbed':>9}")
        for w in sorted({r["workload"] for r in stops}):
            rs = [r for r in stops if r["workload"] == w]
            runs = [x for r in rs for x in r["runs"]]
            statuses = defaultdict(int)
            for x in runs:
                statuses[x[0]] += 1
            st = ",".join(f"{k}:{v}" for k, v in sorted(statuses.items()))
            exits = ",".join(sorted({str(r["exit"]) for r in rs}))
            wall = max((x[1] for x in runs), default=0.0)
            disturbed = sum(1 for x in runs if x[2] and "disturbed:" in x[2])
            print(f"{w:<9} {len(rs):>6} {exits:<10} {len(runs):>4} {st:<24} {wall:>10.2f} "
                  f"{disturbed:>9}")


if __name__ == "__main__":
    main()
