"""The official MCP Python SDK's own server (`MCPServer`, streamable HTTP) serving the same
`lookup_order` tool as bench/mcp.sh's pack, for the client-side comparison (not a test).

Usage: mcp_sdk_server.py PORT [--json]   (--json: JSON answers rather than SSE)
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("orders")
ORDERS = {"1234": {"status": "shipped", "item": "kettle"}}


@server.tool()
def lookup_order(order_id: str) -> dict:
    """Look up an order."""
    return ORDERS[order_id]


if __name__ == "__main__":
    server.run(
        "streamable-http",
        host="127.0.0.1",
        port=int(sys.argv[1]),
        json_response="--json" in sys.argv,
    )
