"""MCP servers as tools (`tools.mcp`, agent_type tool-calls; needs the `mcp` package: the `[mcp]` extra).

Each server (a command started over stdio, or a streamable-HTTP URL) is connected once per event loop; its tools are
listed into the registry with their own JSON schemas and descriptions, and a call goes to the server. A session lives
in a task of its own: MCP's client holds task-bound cancel scopes, and trajectories come and go in other tasks.

A result the server marks as an error is the tool's failure (a ToolError); a server that cannot be reached or has gone
away is the infrastructure's (ToolUnavailable).
"""

from __future__ import annotations

import asyncio
import json

from ..utils.schema import ConfigError
from .base import ToolError, ToolUnavailable
from .config import McpServerConfig
from .registry import Tool

START_SECONDS = 60.0


class McpTools:
    def __init__(self, servers: list[McpServerConfig]):
        self.servers = servers
        self._tools: list[Tool] | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def tools(self) -> list[Tool]:
        async with self._lock:
            if self._tools is None:
                found: list[Tool] = []
                for server in self.servers:
                    found += await self._start(server)
                self._tools = found
        return self._tools

    async def _start(self, server: McpServerConfig) -> list[Tool]:
        try:
            from mcp import Client
            from mcp.client.stdio import StdioServerParameters
        except ImportError:
            raise ConfigError("tools.mcp needs the mcp package: pip install 'asearcher-plugin[mcp]'") from None
        name = server.url or " ".join(server.command or [])
        argv = server.command or []
        target = server.url or StdioServerParameters(command=argv[0], args=argv[1:], env=server.env)
        ready: asyncio.Future = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            try:
                async with Client(target) as client:
                    listed, cursor = [], None
                    while True:
                        page = await client.list_tools(cursor=cursor)
                        listed += page.tools
                        cursor = page.next_cursor
                        if not cursor:
                            break
                    ready.set_result((client, listed))
                    await self._stop.wait()
            except Exception as exc:  # noqa: BLE001 - reported to whoever waits for the server
                if not ready.done():
                    ready.set_exception(exc)

        self._tasks.append(asyncio.get_running_loop().create_task(hold()))
        try:
            client, listed = await asyncio.wait_for(ready, START_SECONDS)
        except Exception as exc:
            raise ConfigError(f"tools.mcp server {name!r} did not start: {type(exc).__name__}: {exc}") from exc
        return [_tool(client, t, server.prefix, name) for t in listed]

    async def aclose(self) -> None:
        self._stop.set()
        for task in self._tasks:
            try:
                await asyncio.wait_for(task, 10)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - closing: a server that fails to stop is left
                task.cancel()
        self._tasks = []


def _tool(client, listed, prefix: str, server: str) -> Tool:
    async def call(**arguments):
        try:
            result = await client.call_tool(listed.name, arguments)
        except Exception as exc:  # the connection, not the tool: the server is gone or stalled
            raise ToolUnavailable(f"MCP server {server!r}: {type(exc).__name__}: {exc}") from None
        text = _text(result)
        if result.is_error:
            raise ToolError(text or "the MCP tool reported an error")
        return text

    schema = listed.input_schema if isinstance(listed.input_schema, dict) else {"type": "object"}
    description = listed.description or listed.title or listed.name
    return Tool(prefix + listed.name, description, schema, call)


def _text(result) -> str:
    parts = []
    for item in result.content or []:
        text = getattr(item, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(item, 'type', 'content')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)
