"""Engines with the contract OpenRLHF gives an agent executor: `await generate(token_ids, sampling_params)`."""

from .types import CompletionOutput, Logprob, RequestOutput, SamplingParams

__all__ = ["CompletionOutput", "Logprob", "RequestOutput", "SamplingParams", "make_engine"]


def make_engine(
    hf_model: str | None = None,
    base_urls: list[str] | None = None,
    model: str = "default",
    tokenizer: str | None = None,
):
    """`(engine, tokenizer)`: an in-process transformers model at `hf_model`, else the OpenAI-compatible servers at
    `base_urls` serving `model`, tokenized with `tokenizer` (default: `model`)."""
    if hf_model:
        from .hf import HFEngine

        engine = HFEngine(hf_model)
        return engine, engine.tokenizer
    if not base_urls:
        raise ValueError("an engine needs a model path or at least one server URL")
    from transformers import AutoTokenizer

    from local_retriever.endpoints import EndpointConfig

    from .openai import OpenAIEngine

    endpoint = EndpointConfig(base_urls=base_urls)  # the shared shape: URLs normalised, the key from $OPENAI_API_KEY
    tok = AutoTokenizer.from_pretrained(tokenizer or model)
    return OpenAIEngine(endpoint.base_urls, model, tok, api_key=endpoint.api_key()), tok
