#!/usr/bin/env bash
# Benchmark (not a test): what the world over MCP and the process runtime cost.
#
# 1. One tool call (`lookup_order`) in the built-in loop (TurnCtx::call_tool, in process)
#    against the same call over MCP on loopback from a raw JSON-RPC client (Rust): p50, p99.
# 2. The same call as an agent sees it through the official MCP Python SDK, made by a
#    session-mode agent under the real `wt run`: p50, p99; and (2b) the same client against
#    the SDK's own server (`MCPServer` over streamable HTTP, SSE and JSON answers).
# 3. Process start cost per run: RUNS one-turn runs of a trivial session-mode agent (Python,
#    stdlib only; and /bin/sh) against the same runs on the in-process demo agent.
#
#   bash bench/mcp.sh
#   CALLS=5000 RUNS=200 bash bench/mcp.sh
set -euo pipefail

CALLS=${CALLS:-2000}
RUNS=${RUNS:-100}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
cd "$root"
cargo build -q --release -p windtunnel --bin wt
wt=$target/release/wt

echo "== 1. built-in loop vs MCP on loopback (Rust client), $CALLS calls"
CALLS=$CALLS cargo bench -q -p windtunnel --bench mcp 2>/dev/null | grep -E "tool call|overhead"

py=$target/py-agents/bin/python
if ! "$py" -c "import mcp" 2>/dev/null; then
    python3 -m venv "$target/py-agents"
    "$py" -m pip install -q -r tests/agents/requirements.txt
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/wt-bench-mcp.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pack/scenarios"
echo 'name = "bench"' > "$work/pack/pack.toml"
cat > "$work/pack/scenarios/one.toml" <<'TOML'
id = "one"
turns = ["Where is order 1234?"]
[[tools]]
name = "lookup_order"
parameters = { type = "object", properties = { order_id = { type = "string" } }, required = ["order_id"] }
effect = { kind = "read", path = "orders", key_arg = "order_id" }
[world.orders.1234]
status = "shipped"
TOML
cat > "$work/sdk.toml" <<TOML
label = "sdk"
runtime = "process"
command = ["$py", "$root/tests/agents/bench_agent.py", "--calls", "$CALLS"]
turn_timeout_s = 600.0
TOML
echo "== 2. over MCP through the official Python SDK client (mcp $("$py" -c 'import importlib.metadata as m; print(m.version("mcp"))')), $CALLS calls"
"$wt" run --pack "$work/pack" --agent "$work/sdk.toml" --out "$work/sdk-runs" >/dev/null 2>&1 || true
"$py" - "$work/sdk-runs" <<'PY'
import json, os, sys
d = sys.argv[1]
for f in os.listdir(d):
    if f.endswith(".json") and "." not in f[:-5]:
        t = json.load(open(os.path.join(d, f)))
        print("tool call over MCP, Python SDK client:         ", t["turns"][0]["reply"] or t["turns"][0].get("error"))
PY

echo "== 2b. the same client against the SDK's own server (MCPServer, streamable HTTP), $CALLS calls"
for mode in sse json; do
    port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    flag=""; [ "$mode" = json ] && flag="--json"
    "$py" "$root/bench/mcp_sdk_server.py" "$port" $flag >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    printf 'tool call, Python SDK client → SDK server (%s): %s\n' "$mode" \
        "$("$py" "$root/tests/agents/bench_agent.py" --calls "$CALLS" --url "http://127.0.0.1:$port/mcp")"
    kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true
done

echo "== 3. process start cost per run, $RUNS one-turn runs"
cat > "$work/py.toml" <<TOML
label = "trivial-python"
runtime = "process"
command = ["$py", "$root/tests/agents/bench_agent.py", "--trivial"]
mcp = false
TOML
cat > "$work/sh.toml" <<TOML
label = "trivial-sh"
runtime = "process"
command = ["/bin/sh", "-c", "while read -r line; do echo '{\"type\": \"reply\", \"text\": \"ok\"}'; done"]
mcp = false
TOML
# No expectations in this pack: agents without MCP may run it.
sed -i '/^\[\[tools\]\]/,$d' "$work/pack/scenarios/one.toml"
secs() {
    local start end
    start=$(date +%s.%N)
    "$wt" run --pack "$work/pack" --runs "$RUNS" --agent "$1" --out "$work/runs-$2" >/dev/null 2>&1 || true
    end=$(date +%s.%N)
    awk "BEGIN { print $end - $start }"
}
demo=$(secs demo demo)
sh=$(secs "$work/sh.toml" sh)
pyt=$(secs "$work/py.toml" py)
printf 'demo agent (in process):        %6.2f s for %d runs\n' "$demo" "$RUNS"
printf 'trivial /bin/sh agent:          %6.2f s   start cost per run %6.1f ms\n' "$sh" "$(awk "BEGIN { print ($sh - $demo) * 1000 / $RUNS }")"
printf 'trivial Python agent (stdlib):  %6.2f s   start cost per run %6.1f ms\n' "$pyt" "$(awk "BEGIN { print ($pyt - $demo) * 1000 / $RUNS }")"
