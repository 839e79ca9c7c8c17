#!/usr/bin/env bash
# Isolation benchmark: one plugin hook in its own process (--isolate-hooks) vs the same hook
# in wt's process, same machine, same run: child start, and dispatch p50/p90 with a small
# and with a full context (trace + score). Prints figures and ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p windtunnel -p wt_test_noop8
cargo bench -p windtunnel --bench isolation -- "$(pwd)/target/release"
