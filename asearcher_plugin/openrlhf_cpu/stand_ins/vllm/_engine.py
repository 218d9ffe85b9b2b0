"""`AsyncLLMEngine` on CPU: `HFEngine` behind the calls OpenRLHF's `RolloutRayActor` makes."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from asearcher_plugin.engines.hf import HFEngine


class AsyncEngineArgs:
    def __init__(
        self, model: str, seed: int = 0, max_model_len: int | None = None, enable_prefix_caching=False, **kwargs
    ):
        self.model, self.seed, self.max_model_len = model, seed, max_model_len
        self.enable_prefix_caching = enable_prefix_caching
        self.other = kwargs  # dtype, TP size, GPU memory, ...: meaningless on CPU, kept for inspection


class _OutputProcessor:
    def __init__(self):
        self.unfinished = 0

    def get_num_unfinished_requests(self) -> int:
        return self.unfinished


class AsyncLLMEngine:
    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> AsyncLLMEngine:
        return cls(engine_args)

    def __init__(self, engine_args: AsyncEngineArgs):
        self.engine = HFEngine(engine_args.model, device="cpu", seed=engine_args.seed)
        if engine_args.max_model_len:
            self.engine.max_model_len = min(self.engine.max_model_len, int(engine_args.max_model_len))
        from asearcher_plugin.openrlhf_cpu.scripted import ScriptedDecoder, Workload

        workload = Workload.from_env()  # the benchmark's scheduling workload instead of the model's own turns
        self.script = ScriptedDecoder(workload, self.engine.tokenizer, self.engine.running) if workload else None
        self.output_processor = _OutputProcessor()
        self.weight_updates = 0
        self.prefix_cache_resets = 0
        self.pauses = 0
        self._group = None
        # Its own thread: generation requests waiting on a paused engine can fill the default executor.
        self._control = ThreadPoolExecutor(1, thread_name_prefix="engine-control")

    async def is_sleeping(self) -> bool:
        return False

    async def generate(self, prompt, sampling_params, request_id: str):
        self.output_processor.unfinished += 1
        try:
            source = self.script or self.engine
            out = await source.generate(prompt["prompt_token_ids"], sampling_params)
        finally:
            self.output_processor.unfinished -= 1
        out.request_id = request_id
        yield out

    async def pause_generation(self, mode: str = "keep") -> None:
        if mode != "keep":
            raise NotImplementedError(f"pause mode {mode!r}: OpenRLHF 0.11.2 uses 'keep'")
        self.pauses += 1
        await asyncio.get_running_loop().run_in_executor(self._control, self.engine.pause)

    async def resume_generation(self) -> None:
        self.engine.resume()

    async def reset_prefix_cache(self) -> None:
        self.prefix_cache_resets += 1  # HFEngine keeps no cache across requests

    async def collective_rpc(self, method: str, args=()):
        # Blocking collectives run off the loop so generation and tool calls go on meanwhile.
        return await asyncio.get_running_loop().run_in_executor(self._control, getattr(self, f"_rpc_{method}"), *args)

    def _rpc_init_process_group(
        self, master_address, master_port, rank_offset, world_size, group_name, backend, use_ray
    ):
        from asearcher_plugin.openrlhf_cpu.weight_sync import join_group

        self._group = join_group(master_address, master_port, rank_offset, world_size)

    def _rpc_update_weight(self, name, dtype, shape, empty_cache=False):
        import torch

        weight = torch.empty(shape, dtype=dtype)
        self._group.broadcast(weight, 0).wait()
        params = dict(self.engine.model.named_parameters())
        with self.engine.step_lock, torch.no_grad():  # never between a step's forward and its sampling
            params[name].copy_(weight.to(params[name].dtype))
        if empty_cache:  # OpenRLHF flags the last tensor of a broadcast
            self.weight_updates += 1
