"""The KB (or web) search and page access as entries of the tool registry, for agent_type tool-calls.

They show the model what the tag agents show it (the same result lines, the same page parts) and count searches and
accesses in the trajectory's counters; their failures go through the same error ladder as any tool's.
"""

from __future__ import annotations

from ..tools.registry import Tool, tool_from_function
from .prompts import format_docs


def builtin_tools(agent, names: list[str]) -> list[Tool]:
    """The built-in tools named in `tools.builtin`, bound to one trajectory's `AgentInstance`."""
    web = agent.config.tools.backend == "web"

    async def search(query: str) -> str:
        """Search the knowledge base for documents about a query; returns the best matches with titles and URLs."""
        agent.searches += 1
        docs = await agent.toolbox.search(query, agent.config.tools.topk)
        return format_docs(docs, agent.config.tools.max_doc_chars)

    async def access(url: str) -> str:
        """Read the page at a URL (one from the search results), part by part: access it again for the next part."""
        agent.accesses += 1
        return await agent._read_page(url)

    if web:
        search.__doc__ = "Search the web for a query; returns the best matches with titles, URLs and snippets."
    made = {"search": search, "access": access}
    return [tool_from_function(made[name]) for name in names]
