"""Search and access backends for the agent."""

from __future__ import annotations

from .base import ToolBox, ToolError, ToolUnavailable


def make_toolbox(config) -> ToolBox:
    """The backend named by `config.tools.backend`."""
    if config.tools.backend == "local":
        from .local import LocalToolBox

        return LocalToolBox(config.tools)
    from .web import WebToolBox

    return WebToolBox(config.tools)


__all__ = ["ToolBox", "ToolError", "ToolUnavailable", "make_toolbox"]
