"""Search and access backends for the agent."""

from __future__ import annotations

from ..config import AgentConfig, ToolsConfig
from .base import ToolBox, ToolError, ToolUnavailable


def make_toolbox(tools: ToolsConfig) -> ToolBox:
    """The backend named by `tools.backend`: the agent's `tools:` section, or synthesis's."""
    if isinstance(tools, AgentConfig):  # the agent's whole config, as asearcher_plugin/env.py still passes it
        tools = tools.tools
    if tools.backend == "local":
        from .local import LocalToolBox

        return LocalToolBox(tools)
    from .web import WebToolBox

    return WebToolBox(tools)


__all__ = ["ToolBox", "ToolError", "ToolUnavailable", "make_toolbox"]
