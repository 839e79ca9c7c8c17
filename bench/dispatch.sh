#!/usr/bin/env bash
# Hook dispatch benchmark: wt (8 no-op plugin hooks, deadlines on) vs pluggy (8 no-op
# implementations), same machine, same run. Prints the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import pluggy' 2>/dev/null || python3 -m pip install --quiet pluggy
cargo build --release -p wt_test_noop8
cargo bench -p windtunnel --bench dispatch -- "$(pwd)/target/release"
