"""A session-mode `process` agent on the official MCP SDK (`mcp.Client`) that makes N tool
calls in its turn and replies with how many TCP connections to wt's MCP port it has left
behind (established or in TIME-WAIT, from /proc/net/tcp*): a client that keeps its
connection leaves one or two, one that reconnects per call leaves about N. Connections that
were there before its client started (an earlier server's TIME-WAIT on the same port number,
from a test running beside this one) are not counted.

    mcp_reuse_agent.py N
"""

import asyncio
import json
import os
import sys

from mcp import Client


def connections(port):
    """The (local, remote) pairs of TCP sockets with `port` on either end."""
    pairs = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, remote, state = fields[1], fields[2], fields[3]
            # 01 ESTABLISHED, 06 TIME_WAIT; wt's port on either end.
            if state in ("01", "06") and (
                int(local.split(":")[1], 16) == port or int(remote.split(":")[1], 16) == port
            ):
                pairs.add((local, remote))
    return pairs


async def main():
    calls = int(sys.argv[1])
    url = os.environ["WT_MCP_URL"]
    port = int(url.split(":")[2].split("/")[0])
    sys.stdin.readline()
    before = connections(port)
    async with Client(url) as client:
        for _ in range(calls):
            await client.call_tool("lookup_order", {"order_id": "1234"})
        # Both ends of one connection are counted: wt's and the client's.
        left = len(connections(port) - before)
    print(json.dumps({"type": "reply", "text": f"calls={calls} connections={left}"}), flush=True)
    sys.stdin.read()


asyncio.run(main())
