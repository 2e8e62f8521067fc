#!/usr/bin/env bash
# The error rates of `memtrial gate` and of the recommendation's pick, simulated through the
# code itself (src/analysis/decide.rs, error_rates_of_the_gate_and_the_pick): experiments of
# two builds whose peaks vary log-normally by σ around a true ratio, analysed as `memtrial
# run` analyses them, gated on `peak_rss > +5%` and weighed for the pick, looked at once after
# 7 runs and under --until-decided (K = 2, at most 30 runs). Prints the table in
# docs/methodology.md ("Undecided, and more runs") and fails when a change within 2% fails
# more than 2.5% of gates or is called leaner in more than 2.5% of experiments, or a 20%
# regression at σ ≤ 5% is caught in fewer than 95% of gates.
#
#   benches/decide_rates.sh            # 200 experiments per case (minutes in release)
#   SIMS=50 benches/decide_rates.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIMS=${SIMS:-200} cargo test --release --lib -- --ignored --exact \
    analysis::decide::tests::error_rates_of_the_gate_and_the_pick --nocapture
