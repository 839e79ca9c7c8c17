#!/usr/bin/env bash
# In-sweep hook cost (see bench/hook_sweep.py): builds wt and the no-op plugin (release, or
# the profile PROFILE names).
#   bash bench/hook_sweep.sh [RUNS] [REPEATS] [lifecycle|eight|turns]
#   PROFILE=dist bash bench/hook_sweep.sh …   (the shipping build, target/dist)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --profile "${PROFILE:-release}" -p windtunnel -p wt_test_noop8
python3 bench/hook_sweep.py "$@"
