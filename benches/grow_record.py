#!/usr/bin/env python3
"""Grows a memtrial JSON record to N samples spread over its runs, under another host name
(so that it imports as a new experiment): benches/import_memory.sh and command_memory.sh.

    grow_record.py SMALL.json N BIG.json
"""
import json
import sys

small, n, big = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rec = json.load(open(small))
runs = [r for v in rec["variants"] for r in v["runs"]]
per = n // len(runs)
for r in runs:
    r["samples"] = [
        {"t_seconds": i * 0.01, "rss_bytes": 1048576 + i, "vsz_bytes": 4194304 + i,
         "threads": 1, "pss_bytes": 1000000 + i, "uss_bytes": 900000 + i, "processes": 1}
        for i in range(per)
    ]
rec["experiment"]["hosts"][0]["hostname"] = "bench-host"
json.dump(rec, open(big, "w"))
