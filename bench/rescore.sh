#!/usr/bin/env bash
# Benchmark (not a test): `wt rescore --no-cache` at --jobs 1 against --jobs 8 (or JOBS),
# every grading asked again of a judge stub that answers in 100 ms (bench/rescore.py, a
# threaded local server). Prints both wall times and their ratio; the suite asserts only that
# both write and print the same bytes (tests/e2e/sweeps.rs).
#
#   bash bench/rescore.sh [RUNS] [JOBS]       # default 304 runs (one grading each), 8 jobs
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p windtunnel --bin wt)
WT=$target/release/wt exec python3 "$root/bench/rescore.py" "$@"
