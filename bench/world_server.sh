#!/usr/bin/env bash
# Benchmark (not a test): what a world server costs, on the reference memory server
# (@modelcontextprotocol/server-memory, from tests/worlds/package-lock.json).
#
# 1. One `open_nodes` call direct on the server's stdio against the same call an agent makes
#    through wt (MCP on loopback, the turn's thread, the forward): p50, p99, the difference.
# 2. A run's fresh state: a new server per run against a lane's kept server after `reset`.
# 3. In a sweep, the headline: RUNS one-turn runs of a trivial /bin/sh agent (no tool calls)
#    on a scenario without a world server, with one per run, and with one per lane; the cost
#    per run and the ratios, measured in one sitting.
#
#   bash bench/world_server.sh
#   CALLS=2000 STARTS=50 RUNS=200 JOBS=2 bash bench/world_server.sh
set -euo pipefail

CALLS=${CALLS:-1000}
STARTS=${STARTS:-20}
RUNS=${RUNS:-100}
JOBS=${JOBS:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
cd "$root"
if ! cmp -s tests/worlds/package-lock.json "$target/npm-worlds/package-lock.json"; then
    rm -rf "$target/npm-worlds" && mkdir -p "$target/npm-worlds"
    cp tests/worlds/package.json tests/worlds/package-lock.json "$target/npm-worlds/"
    (cd "$target/npm-worlds" && npm ci --no-audit --no-fund --loglevel=error)
fi
export PATH="$target/npm-worlds/node_modules/.bin:$PATH"
cargo build -q --release -p windtunnel --bin wt
wt=$target/release/wt

echo "== 1-2. forwarding and fresh state ($CALLS calls, $STARTS starts)"
CALLS=$CALLS STARTS=$STARTS cargo bench -q -p windtunnel --bench world_server 2>/dev/null | grep -E "open_nodes|overhead|fresh state"

work=$(mktemp -d "${TMPDIR:-/tmp}/wt-bench-world.XXXXXX")
trap 'rm -rf "$work"' EXIT
pack() { # pack DIR WORLD_SERVER_TOML
    mkdir -p "$1/scenarios"
    printf 'name = "bench"\n%s\n' "$2" > "$1/pack.toml"
    printf 'id = "one"\nturns = ["hello"]\n' > "$1/scenarios/one.toml"
}
server='[world_server]
command = ["mcp-server-memory"]
env = { MEMORY_FILE_PATH = "{run_dir}/memory.jsonl" }
state = { tool = "read_graph" }
[[world_server.setup]]
tool = "create_entities"
arguments = { entities = [{ name = "order-1234", entityType = "order", observations = ["status: shipped"] }] }'
pack "$work/none" ""
pack "$work/run" "$server"
pack "$work/lane" "$server
per = \"lane\"
reset = [{ tool = \"delete_entities\", arguments = { entityNames = [\"order-1234\"] } }]"
# `per` and `reset` belong to [world_server], before its [[setup]] array of tables.
python3 - "$work/lane/pack.toml" <<'PY'
import sys
p = sys.argv[1]
lines = open(p).read().splitlines()
extra = [l for l in lines if l.startswith("per =") or l.startswith("reset =")]
rest = [l for l in lines if l not in extra]
i = rest.index("[[world_server.setup]]")
open(p, "w").write("\n".join(rest[:i] + extra + rest[i:]) + "\n")
PY
cat > "$work/sh.toml" <<TOML
label = "trivial-sh"
runtime = "process"
command = ["/bin/sh", "-c", "while read -r line; do echo '{\"type\": \"reply\", \"text\": \"ok\"}'; done"]
mcp = false
TOML
secs() {
    local start end
    start=$(date +%s.%N)
    "$wt" run --pack "$work/$1" --runs "$RUNS" --jobs "$JOBS" --agent "$work/sh.toml" --out "$work/runs-$1" >/dev/null 2>&1 \
        || { echo "the $1 sweep failed" >&2; exit 1; }
    end=$(date +%s.%N)
    awk "BEGIN { print $end - $start }"
}
echo "== 3. in a sweep: $RUNS one-turn runs, --jobs $JOBS, a trivial /bin/sh agent"
none=$(secs none)
run=$(secs run)
lane=$(secs lane)
printf 'no world server:               %6.2f s   %6.1f ms per run\n' "$none" "$(awk "BEGIN { print $none * 1000 / $RUNS }")"
printf 'a server per run:              %6.2f s   %6.1f ms per run   %5.2fx\n' "$run" "$(awk "BEGIN { print $run * 1000 / $RUNS }")" "$(awk "BEGIN { print $run / $none }")"
printf 'a server per lane, reset:      %6.2f s   %6.1f ms per run   %5.2fx\n' "$lane" "$(awk "BEGIN { print $lane * 1000 / $RUNS }")" "$(awk "BEGIN { print $lane / $none }")"
