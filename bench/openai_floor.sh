#!/usr/bin/env bash
# Benchmark (not a test): the `openai` runtime against curl sending the same requests to the
# same local stub — the runtime alone and a whole `wt run` —, and the write floor of the same
# runs (see bench/openai_floor.py). Builds wt in release, the runtime-alone driver
# (host/benches/openai_floor.rs, bench profile) and the stub (bench/openai_floor.rs, std only,
# with rustc).
#
#   bash bench/openai_floor.sh [RUNS] [REPEATS]        # default 5000 runs, 5 repeats
#   BASELINE=/tmp/before/wt bash bench/openai_floor.sh # also another build, alternated
#   BENCH_DIR=/mnt/x bash bench/openai_floor.sh        # where runs go (default /dev/shm)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p windtunnel --bin wt -p wt-bench --bin write-floor)
# The runtime alone (host/benches/openai_floor.rs): its executable, built in the bench profile.
runtime_bench=$(cd "$root" && cargo bench -q -p windtunnel --bench openai_floor --no-run --message-format=json \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "openai_floor":
        print(m["executable"])')
stub=$target/release/openai_floor_stub
if [ ! -x "$stub" ] || [ "$root/bench/openai_floor.rs" -nt "$stub" ]; then
    mkdir -p "$(dirname "$stub")"
    rustc -O --edition 2024 "$root/bench/openai_floor.rs" -o "$stub"
fi
command -v curl >/dev/null || { echo "curl is needed (apt-get install curl)" >&2; exit 2; }
WT=$target/release/wt STUB=$stub RUNTIME_BENCH=$runtime_bench exec python3 "$root/bench/openai_floor.py" "$@"
