#!/usr/bin/env bash
# Hook dispatch benchmark: wt (8 no-op plugin hooks, deadlines on) vs pluggy (8 no-op
# implementations), same machine, same run. Prints the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import pluggy' 2>/dev/null || python3 -m pip install --quiet pluggy
cargo build --release -p wt_test_noop8 -p windtunnel
cargo bench -p windtunnel --bench dispatch -- "$(pwd)/target/release"
# In a sweep, not back to back: the same no-op work where users pay for it.
echo
echo "in a sweep (see bench/hook_sweep.py; runs on /dev/shm unless BENCH_DIR says otherwise):"
python3 bench/hook_sweep.py "${RUNS:-10000}" "${REPS:-3}" lifecycle
pluggy1=$(python3 bench/pluggy_dispatch.py 100000 1)
echo "pluggy, one hook to one no-op implementation, back to back: ${pluggy1} ns per point"
