"""An MCP server with one unit-conversion tool and one that always fails, for `tools.mcp` (docs/tools.md; the tests
start it too). Written for the pinned mcp 2.3.0, whose server class is `mcp.server.mcpserver.MCPServer` (mcp 1.x's
`mcp.server.fastmcp.FastMCP` is gone). Over stdio (`python examples/mcp_units_server.py`), or over streamable HTTP
on 127.0.0.1 at the port given as its argument (`python examples/mcp_units_server.py 8765`, then
`url: http://127.0.0.1:8765/mcp`)."""

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("units")


@server.tool()
def miles_to_km(miles: float) -> str:
    """Convert a distance in miles to kilometres."""
    return f"{miles * 1.609344:.3f} km"


@server.tool()
def broken(reason: str) -> str:
    """A tool that always fails."""
    raise ToolError(f"broken on purpose: {reason}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run()
