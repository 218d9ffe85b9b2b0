"""An MCP server for the tests: one unit-conversion tool, and one that always fails. Over stdio, or over streamable
HTTP on 127.0.0.1 at the port given as its argument."""

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
