"""Search and access backends for the agent."""

from __future__ import annotations

from .base import ToolBox, ToolError, ToolUnavailable
from .config import ToolsConfig


def make_toolbox(tools: ToolsConfig) -> ToolBox:
    """The backend named by `tools.backend`: the agent's `tools:` section, or synthesis's."""
    if tools.backend == "local":
        from .local import LocalToolBox

        return LocalToolBox(tools)
    from .web import WebToolBox

    return WebToolBox(tools)


__all__ = ["ToolBox", "ToolError", "ToolUnavailable", "make_toolbox"]
