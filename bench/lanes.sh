#!/usr/bin/env bash
# Lane efficiency (see bench/lanes.py): builds wt in release and runs the sweeps.
#   bash bench/lanes.sh [RUNS] [JOBS,...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p windtunnel --bin wt
# inspect_ai for the side-by-side, optional: installed into a venv under target/ when pip can.
if [ ! -x target/bench-venv/bin/python ]; then
    python3 -m venv target/bench-venv && target/bench-venv/bin/pip install -q inspect-ai openai \
        || echo "(could not install inspect-ai; the side-by-side is skipped)"
fi
python3 bench/lanes.py "$@"
