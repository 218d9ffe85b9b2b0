"""vLLM-shaped request and result types, so code written against vLLM runs on our engines unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class SamplingParams:
    """The subset of `vllm.SamplingParams` the agent and OpenRLHF use, with the same names."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    stop: Optional[list[str]] = None
    include_stop_str_in_output: bool = False
    logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    seed: Optional[int] = None


@dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: Optional[str]  # "stop" | "length" | "abort"
    stop_reason: Optional[str | int] = None
    logprobs: Optional[list[dict[int, Logprob]]] = None
    cumulative_logprob: Optional[float] = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    metrics: dict = field(default_factory=dict)


def with_overrides(params, **overrides):
    """A copy of `params` (ours or vLLM's) with some fields changed."""
    import copy

    new = copy.deepcopy(params)
    for key, value in overrides.items():
        setattr(new, key, value)
    # vLLM derives buffers from `stop` etc. in __post_init__; recompute them for the new values.
    post = getattr(new, "__post_init__", None)
    if post is not None and type(new) is not SamplingParams:
        post()
    return new
