#!/bin/sh
# The pictures of the demo's HTML report in docs/, taken from the current build: runs
# `memtrial demo` (the release build, as the README's first command leaves it) in a fresh
# directory, then looks at memtrial-demo.html in headless chromium 1280 px wide
# (scripts/html_shots.py) and writes
#   docs/demo-report.png          the top of the page: the verdict, the story, the overview
#   docs/demo-report-memory.png   "Memory over time": every run's RSS, lines broken at gaps
#   docs/demo-report-inside.png   the baseline's allocator chart: live and held beside RSS,
#                                 its probe's gaps shaded
# and prints what the demo printed, its progress lines left out (README's capture).
# Fails when the page scrolls sideways at 1280 px.
#
#   scripts/screenshots.sh [--runs N]   (default: the demo's 3 runs per variant)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
runs=3
if [ "${1:-}" = "--runs" ]; then runs=$2; fi
bin="$root/target/release/memtrial"
[ -x "$bin" ] || { echo "screenshots.sh: build first: cargo build --release" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# Standard output and error in one file, in the order they were written.
"$bin" demo --runs "$runs" >all.txt 2>&1 || [ $? -eq 1 ]
# What a user reads: everything but the progress lines ("[ 3/18] …").
{ grep -v '^\[ *[0-9]*/[0-9]*\] ' all.txt || true; } | sed "s#$bin#memtrial#g"
seen=$(python3 "$root/scripts/html_shots.py" memtrial-demo.html --width 1280 --height 1000 \
  --top "$root/docs/demo-report.png" \
  --element '#memory' "$root/docs/demo-report-memory.png" \
  --element '#allocator-glibc' "$root/docs/demo-report-inside.png")
echo "$seen"
python3 - "$seen" <<'EOF'
import json, sys
seen = json.loads(sys.argv[1])
if seen["page_width"] > seen["width"] or seen["sideways"]:
    sys.exit(f"the page scrolls sideways at {seen['width']} px: {seen}")
EOF
echo "wrote docs/demo-report.png docs/demo-report-memory.png docs/demo-report-inside.png"
