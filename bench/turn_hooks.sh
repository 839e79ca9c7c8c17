#!/usr/bin/env bash
# Turn-hook benchmark: a sweep with 4 no-op turn observers vs the same sweep without them.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p windtunnel -p wt_test_noop8
python3 bench/turn_hooks.py "$@"
