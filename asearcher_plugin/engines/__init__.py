"""Engines with the contract OpenRLHF gives an agent executor: `await generate(token_ids, sampling_params)`."""

from .types import CompletionOutput, Logprob, RequestOutput, SamplingParams

__all__ = ["CompletionOutput", "Logprob", "RequestOutput", "SamplingParams"]
