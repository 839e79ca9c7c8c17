"""A world server on the official MCP Python SDK (`MCPServer`), served over streamable HTTP:
a shelf of items one process keeps for every client. The end-to-end suite points a pack's
`[world_server] url` at it; `wt` must reset it between runs and never let two runs use it at
once.

Usage: shelf_server.py PORT
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("shelf")
SHELF = []


@server.tool()
def put(item: str) -> dict:
    """Put an item on the shelf."""
    SHELF.append(item)
    return {"count": len(SHELF)}


@server.tool()
def shelf() -> dict:
    """What is on the shelf."""
    return {"items": list(SHELF)}


@server.tool()
def clear() -> str:
    """Empty the shelf."""
    SHELF.clear()
    return "cleared"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response=False)
