"""The tools' settings: the knowledge-base and web backends, MCP servers and tools of the user's own.

A part of the agent config (`agent.tools`); defined beside the tools so that building them needs nothing above
`tools/`. An extra tool's `module:callable` is resolved while the config validates, so a wrong name fails at load.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..utils.schema import Strict
from .registry import resolve_extra


class LocalToolsConfig(Strict):
    urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:5005"], description="knowledge-base servers")
    timeout: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0)
    check_on_start: bool = Field(
        True,
        description="when OpenRLHF builds the agent in a rollout engine, fail unless "
        "one of the urls answers a /retrieve request from that node (any Search-R1-compatible server)",
    )


class WebToolsConfig(Strict):
    serper_api_key_env: str = "SERPER_API_KEY"
    jina_api_key_env: str = "JINA_API_KEY"
    serper_url: str = "https://google.serper.dev/search"
    jina_url: str = "https://r.jina.ai/"
    timeout: float = Field(30.0, gt=0, description="seconds per connect or read")
    fetch_deadline: float = Field(
        60.0, gt=0, description="seconds one search or page access may take in all, redirects and retries included"
    )
    retries: int = Field(3, ge=0)
    per_host_rps: float = Field(5.0, gt=0, description="requests per second to any one host")
    cache_dir: str | None = Field(None, description="on-disk cache shared by all rollouts on a machine")
    max_page_bytes: int = Field(5_000_000, gt=0)
    allow_private_hosts: list[str] = Field(default_factory=list, description="hosts exempt from the URL guard")


class McpServerConfig(Strict):
    """One MCP server: a command to start over stdio, or the URL of a streamable-HTTP server."""

    command: list[str] | None = Field(None, description="argv of a stdio server, e.g. [python, -m, my_server]")
    env: dict[str, str] | None = Field(None, description="environment of the stdio server (default: inherited)")
    url: str | None = Field(None, description="a streamable-HTTP MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    prefix: str = Field("", description="put before each of the server's tool names (two servers, one name)")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.url is None) == (not self.command):
            raise ValueError("an MCP server needs exactly one of `command` (a non-empty argv) or `url`")
        return self


class ToolsConfig(Strict):
    backend: Literal["local", "web"] = "local"
    topk: int = Field(3, ge=1, le=50)
    max_doc_chars: int = Field(1500, ge=50, description="characters of each search result shown")
    page_chunk_chars: int = Field(5000, ge=200, description="an accessed page is read in chunks of this size")
    max_page_chunks: int = Field(10, ge=1)
    observation_format: Literal["native", "asearcher"] = Field(
        "native",
        description="native: results and page parts as above; asearcher: ASearcher's exact blocks (5,000 "
        "characters per document, a page read whole in 25,000-character chunks, one per call, each summarised by the "
        "model in <think>); max_doc_chars, page_chunk_chars and max_page_chunks then do not apply",
    )
    local: LocalToolsConfig = Field(default_factory=LocalToolsConfig)
    web: WebToolsConfig = Field(default_factory=WebToolsConfig)
    builtin: list[Literal["search", "access"]] = Field(
        default_factory=lambda: ["search", "access"],
        description="agent_type tool-calls: the built-in tools offered to the model (the KB or web backend's)",
    )
    extra: list[str] = Field(
        default_factory=list,
        description="agent_type tool-calls: tools of your own, 'module:callable' each; a function with type hints "
        "(or a `json_schema` attribute) and a docstring as its description, sync or async",
    )
    mcp: list[McpServerConfig] = Field(
        default_factory=list,
        description="agent_type tool-calls: MCP servers whose tools are offered to the model (needs the [mcp] extra)",
    )
    call_deadline: float = Field(60.0, gt=0, description="seconds one tool call of agent_type tool-calls may take")

    @field_validator("extra")
    @classmethod
    def _extra_tools_resolve(cls, specs: list[str]) -> list[str]:
        if specs:
            names = [resolve_extra(spec).name for spec in specs]  # ToolSpecError is a ValueError: reported here
            if len(set(names)) < len(names):
                raise ValueError(f"two extra tools have the same name: {names}")
        return specs
