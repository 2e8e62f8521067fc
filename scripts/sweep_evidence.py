#!/usr/bin/env python3
"""Sweep: run a few small workloads many times across the variants and count
false verdicts and figures shown beyond their rule (both should be 0), the program's
floor against each job's own count of its live bytes, and how often every variant - the
baseline first - was explained near its peak (regions, live/held, the holes: at least
95% of the runs that last a second or more).

    scripts/sweep_evidence.py [--runs-total N] [--memtrial PATH] [--out DIR]

N (default 1000) is the number of workload runs in all, spread over the workloads
and the variants; each memtrial invocation runs every variant `--runs 3` times.
Not a test: it takes minutes and competes for the CPU; its figures go in notes.

Workloads, each with what is known about it (the ground truth the verdicts are held to):
  burst   a ~1 s job of 8 threads holding 128 MiB in 2 KiB blocks, then freeing it:
          no leak, held/live near 1; live at the peak, if shown, is most of the peak
  grow    a 3 s Python batch appending 1.5 MB every 50 ms: a batch, so no trend and no
          leak or "grows" anywhere in its JSON
  shim    the same Python job started through a bash shim that runs helpers then execs,
          and directly: the same recommendation, weighed on the kernel's peak RSS
  true    /bin/true (a few ms): only exact figures; nothing sampled may be shown
  heap    tests/fixtures/c/grow.c: 4 threads grow a heap with holes to 160 MiB live over
          1.5 s, peaking as they end, and print their exact peak of live bytes: the floor
          is no higher than that (allocators round blocks up by at most 1.25x) and no variant
          is flagged for disputing it (they all saw the same program)
  demo    the demo's workload, shorter (`memtrial workload fragment`, 8 threads, 1.5 s)
  server  tests/fixtures/servers/server.py leaking 16 KiB a request under 2 s of load
  service grow.c held for 10 s, run as a service for --duration 2.5s (a worker's shape)

Every workload's runs are checked for what issue 36 asks (statements that would be false):
the floor's headline figure is peak RSS over the floor; no ratio to the baseline of a figure
each variant takes at its own moment (live, held, held/live at the RSS peak; peak live;
peak/floor); no fragmentation size read into held/live; no cause the figures do not
support ("glibc counts each chunk with its header"). And coverage: in each ok run of 1 s
or more, a regions read within 10% of the peak, the allocator's account of its free memory
within 10% (glibc, jemalloc, tcmalloc), live/held at the peak standing (where offered).

A figure is "beyond its rule" when the summary shows it although, recomputed here from
the runs' raw samples, no run meets the rule of docs/methodology.md, or when it
contradicts the ground truth above.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SERVER = os.path.join(ROOT, "tests", "fixtures", "servers", "server.py")

GROW = (
    "import time\nl = []\nend = time.monotonic() + 3\n"
    "while time.monotonic() < end:\n    l.append(b'x' * 1_500_000); time.sleep(0.05)\n"
)
JOB = (
    "import os, time\nn = int(os.environ.get('JOB_MB', '160'))\ntime.sleep(0.3)\n"
    "x = bytearray(n << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\n"
    "time.sleep(1.2)\n"
)
SHIM = (
    "#!/bin/bash\nv=$(python3 -c 'import sys; print(sys.version_info[0])')\n"
    "for i in 1 2 3; do sleep 0.2 & done\nwait\nexec python3 \"$@\"\n"
)


def run_memtrial(memtrial, workdir, args):
    out = os.path.join(workdir, "out.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [memtrial, "--quiet", "run", "--db", os.path.join(workdir, "m.db"), "--json", out] + args
    p = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    if not os.path.exists(out):
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-2000:]}")
    with open(out) as f:
        text = f.read()
    return json.loads(text), text


def span(ts):
    return (ts[-1] - ts[0]) if ts else 0.0


def series_rule(run):
    """Mean/final RSS: at least 4 samples spanning at least 75% of the run."""
    ts = [s["t_seconds"] for s in run["samples"]]
    wall = run["wall_seconds"]
    return len(ts) >= 4 and wall > 0 and span(ts) / wall >= 0.75


def at_peak_count(run):
    """Allocator samples at the memory peak, as analysis counts them: the resident bytes
    the probe read at the sample (one process at a time), or the tree RSS either side of
    it outside the teardown."""
    a = (run.get("inside") or {}).get("allocator")
    samples = run["samples"]
    if not a or not samples:
        return 0
    single = max(s["processes"] for s in samples) <= 1
    peak = max([s["rss_bytes"] for s in samples] + ([run["peak_rss_bytes"]] if single else []))
    if peak <= 0:
        return 0

    def around(t):
        after = next((i for i, s in enumerate(samples) if s["t_seconds"] >= t), None)
        if after is None:
            return None
        rss = samples[after]["rss_bytes"]
        if after > 0 and samples[after]["t_seconds"] != t:
            rss = min(rss, samples[after - 1]["rss_bytes"])
        return rss

    n = 0
    for p in a["series"]:
        t = p["t_seconds"]
        own = p.get("rss_bytes") if single else None
        if own is not None:
            rss = max(own, around(t) or 0)
        elif t > samples[-1]["t_seconds"] or t >= run["wall_seconds"] * 0.95:
            rss = None
        else:
            rss = around(t)
        n += rss is not None and rss >= 0.9 * peak
    return n


def allocator_rule_now(run):
    """Live/held at the RSS peak (issue 36): >= 2 allocator samples at the memory peak."""
    a = (run.get("inside") or {}).get("allocator")
    return bool(a) and len(a["series"]) >= 2 and at_peak_count(run) >= 2


def peak_live_rule(run):
    """Peak live: >= 4 allocator samples with live bytes spanning >= 75% of the run."""
    a = (run.get("inside") or {}).get("allocator")
    if not a or a.get("peak_live_bytes") is None:
        return False
    ts = [p["t_seconds"] for p in a["series"] if p.get("live_bytes") is not None]
    wall = run["wall_seconds"]
    return len(ts) >= 4 and wall > 0 and span(ts) / wall >= 0.75


def pss_rule(run):
    reads = [s for s in run["samples"] if s.get("pss_bytes") is not None]
    if len(reads) < 2:
        return False
    peak = max(s["rss_bytes"] for s in run["samples"])
    return max(s["rss_bytes"] for s in reads) >= 0.9 * peak


RULES = {
    "mean_rss_bytes": series_rule,
    "final_rss_bytes": series_rule,
    "live_at_peak_bytes": allocator_rule_now,
    "held_at_peak_bytes": allocator_rule_now,
    "held_over_live": allocator_rule_now,
    "peak_live_bytes": peak_live_rule,
    "peak_pss_bytes": pss_rule,
    "peak_uss_bytes": pss_rule,
}


def check_rules(doc, tally, label):
    """Every sampled figure a summary shows has at least one ok run meeting its rule."""
    for v in doc["variants"]:
        ok = [r for r in v["runs"] if r["status"] == "ok" and not r["warmup"]]
        s = v["summary"]
        for fig, rule in RULES.items():
            tally["figures_checked"] += 1
            if s.get(fig) is not None and not any(rule(r) for r in ok):
                tally["beyond_rule"] += 1
                tally["examples"].append(f"{label}/{v['name']}: {fig} shown, no run meets its rule")


MOMENT_FIGURES = ("live_at_peak_bytes", "held_at_peak_bytes", "held_over_live", "peak_live_bytes", "peak_over_floor")
BOGUS = ("counts each chunk with its header", "fragmentation/retention, not live data", "what the program has live at its peak")
HOLES_ALLOCATORS = ("glibc", "jemalloc", "tcmalloc")


def coverage(doc, tally):
    """Per ok run of 1 s or more: a regions read within 10% of the peak, the allocator's
    account within 10% (where it gives one), live/held at the peak standing (where it
    offers live bytes). Tallied per variant, and for the baseline apart."""
    base = doc["baseline"]
    for v in doc["variants"]:
        for r in v["runs"]:
            if r["status"] != "ok" or r["warmup"] or r["wall_seconds"] < 1.0:
                continue
            peak = r["peak_rss_bytes"]
            g = r.get("regions")
            a = (r.get("inside") or {}).get("allocator") or {}
            checks = {"regions": bool(g) and max(g["tree_rss_bytes"], g.get("status_rss_bytes", 0)) >= 0.9 * peak}
            if a.get("answered") in HOLES_ALLOCATORS:
                h = a.get("holes")
                checks["holes"] = bool(h) and h["resident_bytes"] >= 0.9 * peak
            if any(p.get("live_bytes") is not None for p in a.get("series", [])):
                checks["live_held"] = allocator_rule_now(r)
            for k, good in checks.items():
                for who in ("all", "baseline") if v["name"] == base else ("all",):
                    c = tally["coverage"].setdefault(who, {}).setdefault(k, [0, 0])
                    c[0] += good
                    c[1] += 1
                if not good:
                    tally["coverage_misses"].append(f"{v['name']}: {k} (peak {peak >> 20} MiB, {r['wall_seconds']:.1f} s)")


def check_floor(doc, text, label, truth):
    """Issue 36's statements: each true, or counted false. `truth`: the job's own peaks of
    live bytes (None where unknown)."""
    out = []
    floor = doc.get("floor")
    for v in doc["variants"]:
        s = v["summary"]
        for f in MOMENT_FIGURES:
            out.append((f"{label}/{v['name']}: no ratio of {f}", f not in s.get("ratio_to_baseline", {})))
        if floor and s.get("peak_over_floor") and s.get("peak_rss_bytes"):
            want = s["peak_rss_bytes"]["median"] / floor["bytes"]
            out.append((f"{label}/{v['name']}: peak/floor is peak RSS over the floor", abs(s["peak_over_floor"]["median"] - want) < 1e-6 * max(1, want)))
        if truth and floor:
            out.append((f"{label}/{v['name']}: no dispute of the floor all allocators saw", s.get("floor_departure") is None))
    for b in BOGUS:
        out.append((f"{label}: never says {b!r}", b not in text))
    if truth and floor:
        out.append((f"{label}: floor {floor['bytes'] / 2**20:.1f} MiB no higher than the job's own peak ({max(truth) / 2**20:.1f} MiB) x 1.25", floor["bytes"] <= 1.25 * max(truth)))
        out.append((f"{label}: the floor a lower bound", floor["lower_bound"] is True))
    return out


def sweep(memtrial, burst, grow, total, workdir):
    tally = {
        "runs": 0,
        "invocations": 0,
        "figures_checked": 0,
        "beyond_rule": 0,
        "verdicts_checked": 0,
        "false_verdicts": 0,
        "examples": [],
        "coverage": {},
        "coverage_misses": [],
        "floor_over_truth": [],
    }
    job = os.path.join(workdir, "job.py")
    shim = os.path.join(workdir, "python3-shim")
    with open(job, "w") as f:
        f.write(JOB)
    with open(shim, "w") as f:
        f.write(SHIM)
    os.chmod(shim, 0o755)
    runs_per = 3
    plans = [
        ("burst", ["--runs", str(runs_per), "--variants", "glibc,arena1,arena2,jemalloc,tcmalloc,mimalloc", "--", burst, "8", "128", "600"]),
        ("grow", ["--runs", str(runs_per), "--variants", "glibc,arena2,jemalloc", "--", "python3", "-c", GROW]),
        ("shim", ["--runs", str(runs_per), "--variants", "glibc", "--variant", "lean=JOB_MB=40", "--", shim, job]),
        ("direct", ["--runs", str(runs_per), "--variants", "glibc", "--variant", "lean=JOB_MB=40", "--", "python3", job]),
        ("true", ["--runs", str(runs_per), "--variants", "glibc,arena1,jemalloc,tcmalloc", "--", "/bin/true"]),
        ("heap", ["--runs", str(runs_per), "--variants", "glibc,arena2,jemalloc,tcmalloc,mimalloc", "--", grow, "4", "160", "1.5"]),
        ("demo", ["--runs", str(runs_per), "--variants", "glibc,jemalloc,tcmalloc", "--", memtrial, "workload", "fragment", "--threads", "8", "--seconds", "1.5"]),
        ("server", ["--runs", str(runs_per), "--variants", "glibc,arena2", "--url", "http://127.0.0.1:{port}/x", "--duration", "2s",
                    "--cooldown", "200ms", "--connections", "4", "--ready-timeout", "20s", "--", "python3", SERVER, "{port}", "leak"]),
        ("service", ["--runs", str(runs_per), "--variants", "glibc,jemalloc", "--duration", "2.5s", "--", grow, "4", "120", "1.5", "10"]),
    ]
    last_direct = None
    while tally["runs"] < total:
        for label, args in plans:
            if tally["runs"] >= total:
                break
            try:
                doc, text = run_memtrial(memtrial, workdir, args)
            except Exception as e:  # an unavailable allocator, a failed run: said, not counted
                print(f"skip {label}: {e}", file=sys.stderr)
                continue
            tally["invocations"] += 1
            tally["runs"] += sum(len(v["runs"]) for v in doc["variants"])
            check_rules(doc, tally, label)
            coverage(doc, tally)
            truth = None
            if label == "heap":
                truth = []
                for v in doc["variants"]:
                    for r in v["runs"]:
                        try:
                            with open(r["stdout_path"]) as f:
                                truth += [int(l.split()[1]) for l in f if l.startswith("peak_live ")]
                        except OSError:
                            pass
            elif label == "burst":
                truth = [128 << 20]
            verdicts = check_floor(doc, text, label, truth)
            if truth and doc.get("floor"):
                tally["floor_over_truth"].append(doc["floor"]["bytes"] / max(truth))
            if label == "burst":
                for v in doc["variants"]:
                    s = v["summary"]
                    verdicts.append((f"{v['name']}: why not leak", (s.get("why") or {}).get("verdict") != "leak"))
                    live, peak = s.get("live_at_peak_bytes"), s.get("peak_rss_bytes")
                    if live is not None and peak is not None:
                        verdicts.append((f"{v['name']}: live at peak is most of the peak", live["median"] > 0.5 * peak["median"]))
                        q = s.get("held_over_live")
                        verdicts.append((f"{v['name']}: held/live near 1", q is None or q["median"] < 2.0))
            elif label == "grow":
                verdicts.append(("no leak/grows in the JSON", "leak" not in text and "grows" not in text))
                for v in doc["variants"]:
                    verdicts.append((f"{v['name']}: no trend", v["summary"].get("trend") is None))
            elif label in ("shim", "direct"):
                rec = doc["recommendation"]
                verdicts.append((f"{label}: weighed on peak RSS", rec["memory_figure"] == "peak_rss_bytes"))
                verdicts.append((f"{label}: picks lean", rec["verdict"].get("variant") == "lean"))
                if label == "shim":
                    last_direct = rec["verdict"].get("variant")
                elif last_direct is not None:
                    verdicts.append(("shim and direct agree", rec["verdict"].get("variant") == last_direct))
            elif label == "true":
                for v in doc["variants"]:
                    s = v["summary"]
                    for fig in ("live_at_peak_bytes", "held_over_live", "mean_rss_bytes", "peak_pss_bytes"):
                        verdicts.append((f"{v['name']}: no {fig} for /bin/true", s.get(fig) is None))
            for what, good in verdicts:
                tally["verdicts_checked"] += 1
                if not good:
                    tally["false_verdicts"] += 1
                    tally["examples"].append(f"{label}: {what}")
            cov = tally["coverage"].get("baseline", {})
            print(
                f"{tally['runs']:>5} runs: {tally['false_verdicts']} false verdicts of {tally['verdicts_checked']}, "
                f"{tally['beyond_rule']} figures beyond their rule of {tally['figures_checked']}; baseline near its peak: "
                + ", ".join(f"{k} {c[0]}/{c[1]}" for k, c in sorted(cov.items())),
                file=sys.stderr,
            )
    return tally


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs-total", type=int, default=1000)
    ap.add_argument("--memtrial", default=os.path.join(ROOT, "target", "release", "memtrial"))
    ap.add_argument("--out", default=None, help="working directory (default: a temporary one)")
    a = ap.parse_args()
    if a.runs_total < 1:
        ap.error("--runs-total must be at least 1")
    # The workloads run in directories of their own: a relative path would name nothing there.
    a.memtrial = os.path.abspath(a.memtrial)
    if not os.access(a.memtrial, os.X_OK):
        ap.error(f"--memtrial {a.memtrial}: not an executable (cargo build --release)")
    workdir = a.out or tempfile.mkdtemp(prefix="memtrial-sweep-")
    os.makedirs(workdir, exist_ok=True)
    burst = os.path.join(workdir, "burst")
    grow = os.path.join(workdir, "grow")
    for exe in (burst, grow):
        subprocess.run(
            ["gcc", "-O2", "-pthread", "-o", exe, os.path.join(ROOT, "tests", "fixtures", "c", os.path.basename(exe) + ".c")],
            check=True,
        )
    tally = sweep(a.memtrial, burst, grow, a.runs_total, workdir)
    ratios = sorted(tally.pop("floor_over_truth"))
    misses = tally.pop("coverage_misses")
    print(json.dumps({k: v for k, v in tally.items() if k != "examples"}, indent=2))
    if ratios:
        print(f"floor / the job's own peak of live bytes: min {ratios[0]:.3f}, median {ratios[len(ratios) // 2]:.3f}, max {ratios[-1]:.3f} over {len(ratios)} experiments")
    short = []
    for who, cs in sorted(tally["coverage"].items()):
        for k, (good, n) in sorted(cs.items()):
            share = good / n if n else 1.0
            print(f"near the peak ({who}): {k} {good}/{n} = {100 * share:.1f}%")
            if share < 0.95:
                short.append(f"{who} {k}")
    for e in tally["examples"][:20]:
        print("  " + e)
    for m in misses[:20]:
        print("  missed: " + m)
    return 1 if tally["false_verdicts"] or tally["beyond_rule"] or short else 0


if __name__ == "__main__":
    sys.exit(main())
