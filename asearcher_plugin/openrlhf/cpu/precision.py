"""float32 where OpenRLHF computes in bfloat16: its trainer (`--ds.param_dtype bf16`) and its vLLM engines.

OpenRLHF offers bf16 or fp16 only and starts every engine with dtype bfloat16. A CPU without bf16 units (AVX2
only, such as the AMD EPYC machines CI has run on) emulates bf16 matrix products: the tiny model's `lm_head`
forward and backward over 2,800 tokens took 15x as long as in float32 on one (2.7 s against 0.18 s; `python -m
asearcher_plugin.openrlhf.cpu.precision` measures it), and OpenRLHF's updates there took 7-106 s. The harness
computes in float32 on both sides instead, on every machine, so results do not depend on which CPU ran them; a run
may keep bf16 with `cpu_harness.bf16` (the learning benchmark does: its figures were measured so). The weight
broadcast still checks that the trainer's dtype is the engines' (`vllm_transport.update_weight`). `asearcher sft
--cpu` keeps OpenRLHF's bf16 unless given `--cpu-float32`.
"""

from __future__ import annotations

ENGINE_DTYPE = "float32"


def train_in_fp32() -> None:
    """In a trainer actor's process (`actors.on_cpu`), before OpenRLHF builds a model: `bf16` means float32 weights
    and a DeepSpeed config with neither bf16 nor fp16 (its fp32 path); fp16 stays as asked."""
    import torch
    from openrlhf.utils import utils

    from .ds_configs import wrap_builders

    if getattr(utils.convert_to_torch_dtype, "fp32_shim", False):
        return
    real_convert = utils.convert_to_torch_dtype

    def convert_to_torch_dtype(param_dtype: str):
        return torch.float32 if param_dtype == "bf16" else real_convert(param_dtype)

    convert_to_torch_dtype.fp32_shim = True
    utils.convert_to_torch_dtype = convert_to_torch_dtype  # models/actor.py and model.py import it when they build

    def fp32_path(real):
        def ds_config(*args, param_dtype="bf16", **kwargs):
            return real(*args, param_dtype="fp32" if param_dtype == "bf16" else param_dtype, **kwargs)

        return ds_config

    wrap_builders(fp32_path, "fp32")


def engine_kwargs(kwargs: dict) -> dict:
    """`RolloutRayActor`'s keyword arguments with the engine's dtype the trainer's."""
    return {**kwargs, "dtype": ENGINE_DTYPE} if kwargs.get("dtype") == "bfloat16" else kwargs


def _measure() -> None:
    import time

    import torch

    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(2800, 128, dtype=dtype, requires_grad=True)
        w = torch.randn(4106, 128, dtype=dtype, requires_grad=True)
        for i in range(6):
            if i == 1:
                started = time.perf_counter()
            torch.nn.functional.linear(x, w).float().sum().backward()
        rows.append((dtype, (time.perf_counter() - started) / 5))
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}; lm_head (4106 x 128) over 2,800 tokens:")
    for dtype, seconds in rows:
        print(f"  {str(dtype):15} forward + backward {seconds * 1000:7.1f} ms")
    print(f"  bf16 / fp32: {rows[1][1] / rows[0][1]:.1f}x")


if __name__ == "__main__":
    _measure()
