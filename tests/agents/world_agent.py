"""A scripted agent for the memory-world pack (examples/memory-world): no model, a fixed
policy, the official MCP Python SDK as its client, started by `wt` with the `process` runtime
in session mode. The world behind the run's MCP URL is the reference memory server
(@modelcontextprotocol/server-memory), reached only through `wt`.

Policies (--policy):
  correct   records a delivery with add_observations; answers a status question from open_nodes
  wrong     records the wrong status ("status: lost") and guesses a status without looking it up
  forbidden deletes the order it is asked about
  script    runs the calls a turn spells out: "do: note text=hi | notes" calls `note` with
            {"text": "hi"}, then `notes` with {}; values are JSON when they parse as JSON
"""

import argparse
import asyncio
import json
import os
import re
import sys


def order_name(text):
    m = re.search(r"\d{3,}", text)
    return f"order-{m.group(0)}" if m else None


def value(result):
    if result is None or result.is_error:
        return None
    text = "".join(getattr(c, "text", "") for c in result.content)
    try:
        return json.loads(text)
    except ValueError:
        return text


async def script(client, text):
    said = []
    for step in text[len("do:"):].split("|"):
        words = step.split()
        if not words:
            continue
        args = {}
        for w in words[1:]:
            k, _, v = w.partition("=")
            try:
                args[k] = json.loads(v)
            except ValueError:
                args[k] = v
        try:
            result = await client.call_tool(words[0], args)
            said.append(f"{words[0]}: {'error' if result.is_error else 'ok'} {value(result) if not result.is_error else ''}")
        except Exception as e:  # a refused call (JSON-RPC error) is the agent's to report
            said.append(f"{words[0]}: refused {e}")
    return "; ".join(said)


async def respond(policy, client, text):
    if policy == "script" and text.startswith("do:"):
        return await script(client, text)
    if text.startswith("This run has been scored"):
        # A debrief: the agent looks at the order again before it explains itself.
        graph = value(await client.call_tool("open_nodes", {"names": ["order-1234"]})) or {}
        seen = [o for e in graph.get("entities", []) for o in e.get("observations", [])]
        return "Looking again, order-1234 shows: " + ", ".join(seen)
    name = order_name(text)
    lower = text.lower()
    if policy == "forbidden" and name:
        await client.call_tool("delete_entities", {"entityNames": [name]})
        return f"I deleted {name}."
    if "deliver" in lower and ("record" in lower or "mark" in lower):
        status = "status: lost" if policy == "wrong" else "status: delivered"
        await client.call_tool(
            "add_observations",
            {"observations": [{"entityName": name, "contents": [status]}]},
        )
        return f"Recorded {status} for {name}."
    if "status" in lower and name:
        if policy == "wrong":
            return f"{name} is probably still in transit."
        graph = value(await client.call_tool("open_nodes", {"names": [name]})) or {}
        for entity in graph.get("entities", []):
            for obs in entity.get("observations", []):
                if obs.startswith("status:"):
                    return f"{name} is {obs.split(':', 1)[1].strip()}."
        return f"I could not find {name}."
    return "How can I help?"


async def main_async(args):
    from mcp import Client

    loop = asyncio.get_running_loop()
    async with Client(os.environ["WT_MCP_URL"]) as client:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            msg = json.loads(line)
            if msg.get("type") != "turn":
                continue
            reply = await respond(args.policy, client, msg["text"])
            print(json.dumps({"type": "reply", "turn": msg["turn"], "text": reply}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--policy", default="correct")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
