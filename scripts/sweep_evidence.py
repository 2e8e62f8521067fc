#!/usr/bin/env python3
"""Sweep: run a few small workloads many times across the variants and count
false verdicts and figures shown beyond their rule (both should be 0).

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


def allocator_rule(run):
    """Live/held at the peak: >= 2 allocator samples at the memory peak, each with the tree's
    RSS on both sides >= 90% of the peak and outside the run's teardown (its last 5%, or
    after the last memory sample). Recomputed from the raw series, not from the probe's own
    `at_peak` (which may fall in the teardown and is not what analysis uses)."""
    a = (run.get("inside") or {}).get("allocator")
    samples = run["samples"]
    if not a or len(a["series"]) < 2 or not samples:
        return False
    single = max(s["processes"] for s in samples) <= 1
    peak = max([s["rss_bytes"] for s in samples] + ([run["peak_rss_bytes"]] if single else []))
    if peak <= 0:
        return False

    def at_peak(t):
        if t > samples[-1]["t_seconds"] or t >= run["wall_seconds"] * 0.95:
            return False
        after = next((i for i, s in enumerate(samples) if s["t_seconds"] >= t), None)
        if after is None:
            return False
        rss = samples[after]["rss_bytes"]
        if after > 0 and samples[after]["t_seconds"] != t:
            rss = min(rss, samples[after - 1]["rss_bytes"])
        return rss >= 0.9 * peak

    return sum(1 for p in a["series"] if at_peak(p["t_seconds"])) >= 2


def pss_rule(run):
    reads = [s for s in run["samples"] if s.get("pss_bytes") is not None]
    if len(reads) < 2:
        return False
    peak = max(s["rss_bytes"] for s in run["samples"])
    return max(s["rss_bytes"] for s in reads) >= 0.9 * peak


RULES = {
    "mean_rss_bytes": series_rule,
    "final_rss_bytes": series_rule,
    "live_at_peak_bytes": allocator_rule,
    "held_at_peak_bytes": allocator_rule,
    "held_over_live": allocator_rule,
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


def sweep(memtrial, burst, total, workdir):
    tally = {
        "runs": 0,
        "invocations": 0,
        "figures_checked": 0,
        "beyond_rule": 0,
        "verdicts_checked": 0,
        "false_verdicts": 0,
        "examples": [],
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
            verdicts = []
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
            print(
                f"{tally['runs']:>5} runs: {tally['false_verdicts']} false verdicts of {tally['verdicts_checked']}, "
                f"{tally['beyond_rule']} figures beyond their rule of {tally['figures_checked']}",
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
    subprocess.run(
        ["gcc", "-O2", "-pthread", "-o", burst, os.path.join(ROOT, "tests", "fixtures", "c", "burst.c")],
        check=True,
    )
    tally = sweep(a.memtrial, burst, a.runs_total, workdir)
    print(json.dumps({k: v for k, v in tally.items() if k != "examples"}, indent=2))
    for e in tally["examples"][:20]:
        print("  " + e)
    return 1 if tally["false_verdicts"] or tally["beyond_rule"] else 0


if __name__ == "__main__":
    sys.exit(main())
