"""`HFEngine`: an in-process transformers engine with the vLLM `generate` contract (CPU or GPU).

Decodes one sequence at a time with a KV cache, in a worker thread so the event loop keeps
serving tool calls; concurrency comes from running several engines (e.g. Ray actors).
Log-probs are those of the sampled token under the temperature-scaled distribution, as vLLM's
`processed_logprobs` mode reports them.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid

from .types import CompletionOutput, Logprob, RequestOutput, SamplingParams


class HFEngine:
    def __init__(self, model_path: str, device: str | None = None, dtype: str = "float32", seed: int = 0):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = (
            AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(self.device).eval()
        )
        self.eos_ids = {
            i
            for i in [self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)]
            if isinstance(i, int)
        }
        # transformers 5.x names the KV cache `cache` (argument and output) and warns on the old `past_key_values`
        params = inspect.signature(self.model.forward).parameters
        self._cache_name = "cache" if "cache" in params else "past_key_values"
        self.max_model_len = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self._lock = threading.Lock()
        # pause/resume as vLLM's `pause_generation(mode="keep")`: requests freeze between two decoding
        # steps and continue afterwards (under new weights, if they changed meanwhile)
        self.running = threading.Event()
        self.running.set()
        self.step_lock = threading.Lock()
        self._generator = torch.Generator(device="cpu").manual_seed(seed)
        self.version = 0  # policy version, bumped by whoever updates the weights

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: SamplingParams, multi_modal_data=None, **_
    ) -> RequestOutput:
        # A cancelled caller cannot stop a worker thread: the flag makes it end at the next token (finish_reason
        # "abort", as vLLM's abort) instead of decoding to max_tokens for no one while holding the model.
        aborted = threading.Event()
        try:
            return await asyncio.to_thread(self.generate_sync, list(prompt_token_ids), sampling_params, aborted)
        except asyncio.CancelledError:
            aborted.set()
            raise

    def pause(self) -> None:
        """Returns once no decoding step is running; none starts until `resume()`."""
        self.running.clear()
        with self.step_lock:
            pass

    def resume(self) -> None:
        self.running.set()

    def _step(self, ids, past):
        while True:
            self.running.wait()
            with self.step_lock:
                if self.running.is_set():  # re-checked under the lock: pause() may have won the race
                    return self.model(input_ids=ids, use_cache=True, **{self._cache_name: past})

    def generate_sync(
        self, prompt_token_ids: list[int], params: SamplingParams, aborted: threading.Event | None = None
    ) -> RequestOutput:
        import torch

        max_tokens = params.max_tokens if params.max_tokens is not None else self.max_model_len - len(prompt_token_ids)
        max_tokens = max(0, min(max_tokens, self.max_model_len - len(prompt_token_ids)))
        stops = [s for s in (params.stop or []) if s]
        generator = self._generator if params.seed is None else torch.Generator().manual_seed(params.seed)
        tokens: list[int] = []
        logprobs: list[dict[int, Logprob]] = []
        finish, stop_reason, text = "length", None, ""
        with self._lock, torch.inference_mode():
            past = None
            ids = torch.tensor([prompt_token_ids], device=self.device)
            for step in range(max_tokens):
                if aborted is not None and aborted.is_set():
                    finish = "abort"
                    break
                out = self._step(ids, past)
                past = getattr(out, self._cache_name)
                logits = out.logits[0, -1].float()
                if step < params.min_tokens:
                    for e in self.eos_ids:
                        logits[e] = float("-inf")
                token, logprob = _sample(logits, params, generator)
                tokens.append(token)
                if params.logprobs is not None:
                    logprobs.append({token: Logprob(logprob, rank=1)})
                ids = torch.tensor([[token]], device=self.device)
                if token in self.eos_ids:
                    finish, stop_reason = "stop", token
                    break
                if stops:
                    text = self.tokenizer.decode(tokens, skip_special_tokens=params.skip_special_tokens)
                    hit = next((s for s in stops if s in text[-(len(s) + 16) :]), None)
                    if hit:
                        finish, stop_reason = "stop", hit
                        break
        text = self.tokenizer.decode(tokens, skip_special_tokens=params.skip_special_tokens)
        if isinstance(stop_reason, str) and not params.include_stop_str_in_output:
            text = text[: text.rfind(stop_reason)]
        output = CompletionOutput(
            0,
            text,
            tokens,
            finish,
            stop_reason,
            logprobs if params.logprobs is not None else None,
            sum(next(iter(d.values())).logprob for d in logprobs) if logprobs else None,
        )
        return RequestOutput(uuid.uuid4().hex, list(prompt_token_ids), [output])


def _sample(logits, params: SamplingParams, generator) -> tuple[int, float]:
    import torch

    if params.temperature <= 1e-5:
        logp = torch.log_softmax(logits, -1)
        token = int(torch.argmax(logits))
        return token, float(logp[token])
    logits = logits / params.temperature
    logp = torch.log_softmax(logits, -1)
    probs = logp.exp()
    if params.top_k and params.top_k > 0:
        kth = torch.topk(probs, min(params.top_k, probs.numel())).values[-1]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_p, 0) - sorted_p < params.top_p
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[order[keep]] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
    token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
    return token, float(logp[token])
