"""Benchmark agents for bench/mcp.sh (not used by the tests).

--calls N: a session-mode agent that, on its one turn, makes N `lookup_order` calls over MCP
with the official Python SDK and replies with the p50 and p99 of one call, in microseconds.
--trivial: a session-mode agent that answers every turn at once, without MCP (start cost).
--calls N --url URL: the same N calls against an MCP server at URL, outside wt; prints the
p50 and p99 and exits.
"""

import json
import os
import sys
import time


def main():
    if "--trivial" in sys.argv:
        for line in sys.stdin:
            msg = json.loads(line)
            print(json.dumps({"type": "reply", "turn": msg["turn"], "text": "ok"}), flush=True)
        return
    n = int(sys.argv[sys.argv.index("--calls") + 1])
    import asyncio

    from mcp import Client

    async def timed(client):
        times = []
        for i in range(n + 50):
            t = time.perf_counter_ns()
            await client.call_tool("lookup_order", {"order_id": "1234"})
            if i >= 50:
                times.append(time.perf_counter_ns() - t)
        times.sort()
        p50 = times[len(times) // 2] / 1000
        p99 = times[int((len(times) - 1) * 0.99)] / 1000
        return f"p50_us={p50:.1f} p99_us={p99:.1f}"

    if "--url" in sys.argv:
        url = sys.argv[sys.argv.index("--url") + 1]

        async def direct():
            async with Client(url) as client:
                print(await timed(client), flush=True)

        asyncio.run(direct())
        return

    async def run():
        async with Client(os.environ["WT_MCP_URL"]) as client:
            line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            msg = json.loads(line)
            print(json.dumps({"type": "reply", "turn": msg["turn"], "text": await timed(client)}), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    asyncio.run(run())


if __name__ == "__main__":
    main()
