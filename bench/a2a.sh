#!/usr/bin/env bash
# The a2a runtime's benchmarks: a turn against the official Python SDK's server vs curl
# (bench/a2a.py), and lane efficiency against a 50 ms A2A agent (bench/lanes.py, AGENTS=a2a).
#   bash bench/a2a.sh [N] [RUNS] [JOBS,...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p windtunnel --bin wt
if ! target/py-agents/bin/python -c "import a2a.server.routes" 2>/dev/null; then
    python3 -m venv target/py-agents
    target/py-agents/bin/python -m pip install -q -r tests/agents/requirements.txt
fi
python3 bench/a2a.py "${1:-200}"
AGENTS=a2a python3 bench/lanes.py "${2:-640}" "${3:-1,8,32}"
