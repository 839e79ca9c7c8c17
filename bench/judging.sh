#!/usr/bin/env bash
# Benchmark (not a test): what the harness itself adds per simulated-user turn and per judge
# call, against sending the same model requests straight to the same local mock with curl —
# at --jobs 1 and --jobs 16 (see bench/judging.py). Builds wt in release and the mock
# (bench/openai_floor.rs, std only, with rustc).
#
#   bash bench/judging.sh [RUNS] [REPEATS]        # default 200 runs a sweep, 3 repeats
#   BENCH_DIR=/mnt/x bash bench/judging.sh        # where runs go (default /dev/shm)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p windtunnel --bin wt)
stub=$target/release/openai_floor_stub
if [ ! -x "$stub" ] || [ "$root/bench/openai_floor.rs" -nt "$stub" ]; then
    mkdir -p "$(dirname "$stub")"
    rustc -O --edition 2024 "$root/bench/openai_floor.rs" -o "$stub"
fi
command -v curl >/dev/null || { echo "curl is needed (apt-get install curl)" >&2; exit 2; }
WT=$target/release/wt STUB=$stub exec python3 "$root/bench/judging.py" "$@"
