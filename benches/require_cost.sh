#!/usr/bin/env bash
# Measures what memtrial's require probe (probe-shim/ruby/memtrial_require.rb, loaded through
# RUBYOPT by `--probe require`) costs a Ruby boot: Debian's Rails booting `require
# "rails/all"`, RUNS times without the probe and with it, alternating. Per boot: wall time,
# the resident bytes the require added and the objects it allocated (both read by the
# program itself around the require), and with the probe the tree's size.
# Measured on 2 cores (Ruby 3.1, Rails 6.1, 937 files loaded): boot 0.66 s → 0.71 s (+7%);
# the resident bytes the require added unchanged within 1.1 MiB (43.5 vs 42.4 MiB, run-to-run
# spread); the program counts 543,898 → 571,460 objects: the probe's own (21 per wrapped
# require, 10 more per require_relative, measured at load) are taken out of every node, which
# puts rails/all at 533,104, 2% under the uninstrumented count.
#
#   bash benches/require_cost.sh        # from the repo root; no arguments; ~30 s
#
# Environment (all optional):
#   RUNS   boots each way   (default 5)
#
# A benchmark, not a test: it prints the figures and exits 0 unless something broke.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS=${RUNS:-5}
ruby -e 'require "rails/all"' 2>/dev/null || { echo "needs Debian's ruby-rails (apt-get install ruby-rails)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/boot.rb" <<'RB'
rss = -> { File.read('/proc/self/statm').split[1].to_i * 4096 }
t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
before, objects = rss.call, GC.stat(:total_allocated_objects)
require "rails/all"
printf("%.3f %d %d\n", Process.clock_gettime(Process::CLOCK_MONOTONIC) - t,
       rss.call - before, GC.stat(:total_allocated_objects) - objects)
RB
for i in $(seq "$RUNS"); do
    echo "off $(ruby "$work/boot.rb")" >> "$work/out"
    mkdir -p "$work/tree$i"
    echo "on $(MEMTRIAL_REQUIRE_DIR="$work/tree$i" ruby -r"$PWD/probe-shim/ruby/memtrial_require.rb" "$work/boot.rb") $(grep -c '^N' "$work"/tree"$i"/*)" >> "$work/out"
done
python3 - "$work/out" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for way in ("off", "on"):
    r = [x for x in rows if x[0] == way]
    wall = statistics.median(float(x[1]) for x in r)
    grew = statistics.median(int(x[2]) for x in r) / 2**20
    objs = statistics.median(int(x[3]) for x in r)
    nodes = f", {r[0][4]} requires in the tree" if way == "on" else ""
    print(f"probe {way:3}: boot {wall:.3f} s, resident +{grew:.1f} MiB, {objs:,} objects{nodes} (medians of {len(r)})")
PY
