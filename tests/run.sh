#!/usr/bin/env bash
# The whole test suite, on a fresh machine with a Rust toolchain and python3: first what the
# suite needs beside Rust, then `cargo test --workspace` with any arguments given
# (e.g. `bash tests/run.sh --locked`).
#
# - Chromium, for the HTML report tests (tests/e2e/reports.rs renders pages headless):
#   Debian's `chromium`, installed with apt-get when missing (as root). Those tests never skip:
#   without a browser they fail, saying how to install one.
# - The MCP test agents' Python venv (target/py-agents, from tests/agents/requirements.txt):
#   third-party MCP clients on the official Python SDK. The suite builds it itself when
#   missing; building it here keeps pip out of the tests' time and makes a PyPI problem an
#   early, plain error.
# - The reference MCP servers the suite uses as scenario worlds (target/npm-worlds, from
#   tests/worlds/package-lock.json, with `npm ci`): node and npm must be installed.
# - The a2a runtime's JavaScript agent on the official A2A JavaScript SDK (target/npm-agents,
#   from tests/agents/js/package-lock.json, with `npm ci`); its Python agent is in the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
    echo "== installing chromium (apt-get)"
    log=$(mktemp)
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$log" 2>&1 \
        || [ ! -x /usr/bin/chromium ]; then
        cat "$log" >&2
        echo "error: could not install chromium (apt-get install -y chromium, as root); the HTML report tests need it" >&2
        exit 1
    fi
    rm -f "$log"
fi

if ! target/py-agents/bin/python -c "import mcp, agents, fakellm, a2a.server.routes" 2>/dev/null; then
    echo "== the e2e agents' Python venv (tests/agents/requirements.txt)"
    rm -rf target/py-agents
    python3 -m venv target/py-agents
    target/py-agents/bin/python -m pip install -q -r tests/agents/requirements.txt
fi

# The npm world servers the suite uses as scenario worlds (tests/worlds/package-lock.json):
# installed with `npm ci` into target/npm-worlds when missing or out of date.
if ! cmp -s tests/worlds/package-lock.json target/npm-worlds/package-lock.json \
    || [ ! -e target/npm-worlds/node_modules/.bin/mcp-server-memory ]; then
    echo "== the e2e world servers (tests/worlds/package.json, npm ci)"
    rm -rf target/npm-worlds
    mkdir -p target/npm-worlds
    cp tests/worlds/package.json tests/worlds/package-lock.json target/npm-worlds/
    (cd target/npm-worlds && npm ci --no-audit --no-fund --loglevel=error)
fi

# The a2a runtime's JavaScript test agent on the official A2A JavaScript SDK
# (tests/agents/js/package-lock.json): installed with `npm ci` into target/npm-agents when
# missing or out of date, beside its script.
if ! cmp -s tests/agents/js/package-lock.json target/npm-agents/package-lock.json \
    || ! cmp -s tests/agents/js/a2a_js_agent.mjs target/npm-agents/a2a_js_agent.mjs \
    || [ ! -e target/npm-agents/node_modules/@a2a-js/sdk/package.json ]; then
    echo "== the e2e JavaScript A2A agent (tests/agents/js/package.json, npm ci)"
    rm -rf target/npm-agents
    mkdir -p target/npm-agents
    cp tests/agents/js/package.json tests/agents/js/package-lock.json tests/agents/js/a2a_js_agent.mjs target/npm-agents/
    (cd target/npm-agents && npm ci --no-audit --no-fund --loglevel=error)
fi

# Every package of the lock file, for every platform: the hook-crate tests run cargo
# --offline with a copy of it (the harness fetches too; here a registry problem is an early,
# plain error).
echo "== cargo fetch --locked"
cargo fetch --locked

echo "== cargo test --workspace $*"
cargo test --workspace "$@"
