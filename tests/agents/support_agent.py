"""A scripted support agent for the end-to-end suite: no model, a fixed policy, and the
official MCP Python SDK as its client. It plays a third-party agent that `wt` starts with the
`process` runtime, in session mode (JSON lines on stdin/stdout) or one-shot mode (one process
per turn, `--input`), and acts on the run's fixture world over MCP.

Policies (--policy):
  correct     solves the demo pack: looks orders up, refunds damaged ones, hands over to a human
  forbidden   refunds every order it sees (the constraint layer must catch it)
  wrong-args  calls lookup_order with an integer order id first (a failed call), then correctly
  crash       writes a traceback to stderr and exits 1 on its first turn
  hang        starts a grandchild, records the group, and never answers
  isolation   for two scenarios at once: meets its peer, then probes the peer's world and URL
  late        run 1 calls the MCP address of run 0, which has ended
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

# The MCP SDK is imported in main(), after the hang policy has recorded its process group:
# importing it is most of the agent's start-up time.
Client = None


def order_number(text):
    m = re.search(r"\d{3,}", text)
    return m.group(0) if m else None


def mentions(text, words):
    lower = text.lower()
    return any(w in lower for w in words)


def result_value(result):
    """The JSON value a tool returned, or None for a failed or skipped call."""
    if result is None or result.is_error:
        return None
    text = "".join(getattr(c, "text", "") for c in result.content)
    try:
        return json.loads(text)
    except ValueError:
        return text


class Memory:
    """What the agent remembers of a session: in the process (session mode) or in a file
    keyed by the session id (one-shot mode, like a CLI agent's --resume)."""

    def __init__(self, path=None):
        self.path = path
        self.order = None
        if path and os.path.exists(path):
            with open(path) as f:
                self.order = json.load(f).get("order")

    def save(self):
        if self.path:
            with open(self.path, "w") as f:
                json.dump({"order": self.order}, f)


OFFERED = {}


async def call(client, name, args):
    """Calls `name` if the run's MCP server offers it (like a model that only calls the tools
    it was shown); None otherwise."""
    if id(client) not in OFFERED:
        OFFERED[id(client)] = {t.name for t in (await client.list_tools()).tools}
    if name not in OFFERED[id(client)]:
        return None
    return await client.call_tool(name, args)


async def respond(policy, client, text, memory, args):
    order = order_number(text) or memory.order
    memory.order = order
    if policy == "crash":
        sys.stderr.write("Traceback (most recent call last):\n  File \"agent.py\"\nRuntimeError: boom: the agent crashed\n")
        sys.stderr.flush()
        os._exit(1)
    if policy == "hang":
        while True:
            time.sleep(1)
    if order is None:
        return "Happy to help. Which order number is this about?"
    if policy == "forbidden":
        await call(client, "issue_refund", {"order_id": order, "reason": "goodwill"})
    if mentions(text, ["human", "person", "someone"]):
        r = await call(client, "create_ticket", {"order_id": order, "summary": f"Customer asks for a human about order {order}"})
        n = result_value(r)
        return f"I've opened ticket #{n} for order {order}; a colleague will contact you shortly."
    if policy == "wrong-args":
        await call(client, "lookup_order", {"order_id": int(order)})
    found = result_value(await call(client, "lookup_order", {"order_id": order}))
    if not isinstance(found, dict):
        return f"I couldn't find order {order}."
    status = found.get("status", "unknown")
    item = found.get("item", "item")
    if mentions(text, ["refund", "damaged", "broken"]):
        if status != "delivered":
            return f"Order {order} is {status}, so it can't be refunded yet."
        await call(client, "issue_refund", {"order_id": order, "reason": "arrived damaged"})
        return f"I've issued a refund for order {order} (the {item})."
    return f"Order {order} (the {item}) is {status}."


def post(url, body, session=None):
    """A raw JSON-RPC POST, as a client that does not use the SDK would send it."""
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if session:
        headers["mcp-session-id"] = session
        headers["mcp-protocol-version"] = "2025-03-26"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("mcp-session-id")
    except urllib.error.HTTPError as e:
        return e.code, None


async def isolation(client, text, args):
    """Meets the peer scenario's agent (both must be running at once), then checks that only
    its own world is reachable: its own order is there, the peer's is not; a session opened
    on its own address is refused at the peer's."""
    me = os.environ["WT_RUN_ID"]
    url = os.environ["WT_MCP_URL"]
    with open(os.path.join(args.meet, me), "w") as f:
        json.dump({"url": url}, f)
    peer = None
    deadline = time.time() + 20
    while time.time() < deadline and peer is None:
        for name in os.listdir(args.meet):
            if name != me:
                with open(os.path.join(args.meet, name)) as f:
                    peer = json.load(f)["url"]
        await asyncio.sleep(0.05)
    if peer is None:
        return "no peer showed up"
    mine, theirs = re.findall(r"\d{4}", text)[:2]
    own = result_value(await call(client, "lookup_order", {"order_id": mine}))
    other = result_value(await call(client, "lookup_order", {"order_id": theirs}))
    await call(client, "add_note", {"text": f"note from {mine}"})
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
    _, session = post(url, init)
    crossed, _ = post(peer, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                             "params": {"name": "add_note", "arguments": {"text": "crossed"}}}, session)
    # Leave the peer time to finish its own probes before this run (and its address) ends.
    with open(os.path.join(args.meet, me + ".done"), "w") as f:
        f.write("done")
    deadline = time.time() + 20
    while time.time() < deadline and len([n for n in os.listdir(args.meet) if n.endswith(".done")]) < 2:
        await asyncio.sleep(0.05)
    return f"own={'found' if isinstance(own, dict) else 'missing'} peer={'found' if isinstance(other, dict) else 'missing'} cross-session={crossed}"


async def late(client, text, args):
    """Run 0 leaves its address behind; run 1 calls it."""
    path = os.path.join(args.meet, "run0-url")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(os.environ["WT_MCP_URL"])
        return "first run: address left behind"
    with open(path) as f:
        old = f.read()
    status, _ = post(old, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "late", "version": "1"}}})
    return f"old address answered HTTP {status}"


async def turn(client, text, memory, args):
    if args.policy == "isolation":
        return await isolation(client, text, args)
    if args.policy == "late":
        return await late(client, text, args)
    return await respond(args.policy, client, text, memory, args)


async def session_mode(args):
    loop = asyncio.get_running_loop()
    memory = Memory()
    async with Client(os.environ["WT_MCP_URL"]) as client:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            msg = json.loads(line)
            if msg.get("type") != "turn":
                continue
            sys.stderr.write(f"turn {msg['turn']}: {msg['text']}\n")
            reply = await turn(client, msg["text"], memory, args)
            print(json.dumps({"type": "reply", "turn": msg["turn"], "text": reply}), flush=True)


async def one_shot(args):
    sys.stderr.write(f"mcp_config={args.mcp_config}\n")
    with open(args.mcp_config) as f:
        url = json.load(f)["mcpServers"]["wt"]["url"]
    state = os.environ.get("AGENT_STATE")
    memory = Memory(os.path.join(state, args.session + ".json") if state else None)
    async with Client(url) as client:
        reply = await turn(client, args.input, memory, args)
    memory.save()
    if args.json:
        print(json.dumps({"result": reply, "turn": args.turn}))
    else:
        print(reply)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--policy", default="correct")
    p.add_argument("--input")
    p.add_argument("--mcp-config")
    p.add_argument("--session")
    p.add_argument("--turn")
    p.add_argument("--json", action="store_true")
    p.add_argument("--pids")
    p.add_argument("--meet")
    args = p.parse_args()
    if args.policy == "crash":
        # What the agent's environment holds, for the test that checks it is explicit.
        for name in ["AGENT_API_KEY", "DB_URL", "PASSED_THROUGH", "NOT_PASSED"]:
            sys.stderr.write(f"{name}={os.environ.get(name, 'unset')}\n")
    if args.policy == "hang":
        # A grandchild in the agent's group, recorded before anything else can go wrong.
        child = subprocess.Popen(["sleep", "300"])
        with open(args.pids, "w") as f:
            json.dump({"pgid": os.getpgid(0), "pids": [os.getpid(), child.pid]}, f)
    global Client
    from mcp import Client
    if args.input is not None:
        asyncio.run(one_shot(args))
    else:
        asyncio.run(session_mode(args))


if __name__ == "__main__":
    main()
