"""vLLM-shaped request and result types, so code written against vLLM runs on our engines unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    """The subset of `vllm.SamplingParams` the agent and OpenRLHF use, with the same names."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop: list[str] | None = None
    include_stop_str_in_output: bool = False
    logprobs: int | None = None
    skip_special_tokens: bool = True
    seed: int | None = None


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None  # "stop" | "length" | "abort"
    stop_reason: str | int | None = None
    logprobs: list[dict[int, Logprob]] | None = None
    cumulative_logprob: float | None = None


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
