"""One model turn as the executor saw it, for whoever watches a trajectory while it runs (`asearcher demo`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class TurnEvent:
    """`text` is what the model wrote in this call; `action` what the agent made of it (search, access, answer,
    invalid, or none when the token budget ran out first); `feedback` is exactly what the agent appended for the
    next call: results, a page part, a failed tool call or the invalid-action note. For agent_type tool-calls,
    `action` is tool_calls and `calls` holds each call's name, arguments and result."""

    turn: int
    text: str
    action: str
    argument: str = ""
    error: str = ""
    feedback: str = ""
    done: bool = False
    finish_reason: str | None = None
    generate_seconds: float = 0.0
    step_seconds: float = 0.0
    calls: list[dict] = field(default_factory=list)  # agent_type tool-calls: each call's name, arguments, result

    def to_json(self) -> dict:
        return asdict(self)


# Awaited after every turn; None (the default everywhere) leaves the executor as it is.
TurnHook = Callable[[TurnEvent], Awaitable[None]]
