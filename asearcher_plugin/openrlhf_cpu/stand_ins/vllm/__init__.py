"""CPU stand-in for the `vllm` package, used only by `asearcher_plugin.openrlhf_cpu`.

vLLM needs CUDA. OpenRLHF's own `RolloutRayActor` (agent loading, `generate_responses`,
pause/resume, weight updates) runs unchanged on top of this module; only the engine underneath
is replaced, by `HFEngine` (transformers on CPU) behind vLLM's `AsyncLLMEngine` surface:
`generate`, `collective_rpc("init_process_group" | "update_weight")` over a gloo group instead
of NCCL, `pause_generation(mode="keep")` / `resume_generation`, `reset_prefix_cache`, and the
unfinished-request count OpenRLHF balances load with.
"""

from asearcher_plugin.engines.types import SamplingParams  # noqa: F401 - vLLM's name for it

from ._engine import AsyncEngineArgs, AsyncLLMEngine  # noqa: F401

__version__ = "0.29.0"  # the version OpenRLHF 0.11.2 pins; it checks > 0.8.5 and > 0.10.0
