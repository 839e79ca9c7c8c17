"""A session-mode `process` agent that speaks raw MCP (stdlib only), for verdict tests.

    mcp_raw_agent.py bad-args      # calls lookup_order with an argument off its schema, then
                                   # replies that the order shipped
    mcp_raw_agent.py after-reply   # replies at once, then (after a moment) calls issue_refund:
                                   # no turn is in progress, so the call is refused
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

URL = os.environ["WT_MCP_URL"]
session = None


def post(body):
    global session
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }
    if session:
        headers["mcp-session-id"] = session
        headers["mcp-protocol-version"] = "2025-03-26"
    req = urllib.request.Request(URL, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req) as resp:
            session = resp.headers.get("mcp-session-id") or session
            return resp.read()
    except urllib.error.HTTPError as e:
        return e.read()


def call(i, name, arguments):
    return post({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                 "params": {"name": name, "arguments": arguments}})


def reply(text):
    print(json.dumps({"type": "reply", "text": text}), flush=True)


def main():
    mode = sys.argv[1]
    sys.stdin.readline()
    post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
          "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                     "clientInfo": {"name": "raw", "version": "1"}}})
    post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    if mode == "bad-args":
        call(1, "lookup_order", {"order": "1234"})
        reply("Order 1234 has shipped.")
    elif mode == "after-reply":
        reply("Order 1234 has shipped.")
        time.sleep(0.5)
        call(1, "issue_refund", {"order_id": "1234"})
    sys.stdin.read()


main()
