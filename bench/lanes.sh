#!/usr/bin/env bash
# Lane efficiency (see bench/lanes.py): builds wt in release and runs the sweeps.
#   bash bench/lanes.sh [RUNS] [JOBS,...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p windtunnel --bin wt
python3 bench/lanes.py "$@"
