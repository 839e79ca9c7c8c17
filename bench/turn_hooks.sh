#!/usr/bin/env bash
# Turn-hook benchmark: a sweep with 4 no-op turn observers against the same sweep without
# them (bench/hook_sweep.py's `turns` case).   bash bench/turn_hooks.sh [RUNS] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p windtunnel -p wt_test_noop8
python3 bench/hook_sweep.py "${1:-10000}" "${2:-5}" turns
