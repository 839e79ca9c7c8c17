#!/usr/bin/env bash
# Benchmark (not a test): `wt compare --gate` simulated on packs of 1, 30 and 300 scenarios
# at 10 and 20 runs a side, seeded, no network (`gate-sim` of bench/src, which decides through
# the gate's own code). Prints, per case, how often the gate fails and how often the old
# per-scenario rule (two-sided Fisher at alpha on each scenario alone) would have:
#   A/A                    the false-alarm rate: goal ≤ alpha at every pack size
#   one drops 0.9 → 0.7    power against one real drop (the rest unchanged)
#   one drops 0.9 → 0.4
#   all drop 0.9 → 0.8     power against a broad small drop
#
#   bench/compare_sim.sh                       # 2000 comparisons per cell, Holm
#   REPS=10000 CORRECTION=bh bench/compare_sim.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p wt-bench --bin gate-sim)
"$target/release/gate-sim" --reps "${REPS:-2000}" --seed "${SEED:-1}" \
    --correction "${CORRECTION:-holm}" --alpha "${ALPHA:-0.05}"
