"""DeepSpeed's two C++ ops that its CPU accelerator compiles on first use, left unbuilt.

A fresh environment compiled both in the first training run: `deepspeed_shm_comm` in 91 s and the CPU `fused_adam`
in 133 s on CI's 2 cores, and again whenever another environment had replaced them in the shared build cache.
Neither is on a GPU's path, and neither changes what is computed:

- `deepspeed_shm_comm` backs only `inference_all_reduce` (DeepSpeed-Inference's tensor parallelism); training
  all-reduces through gloo either way. It is marked incompatible, as DeepSpeed marks it off Linux;
- the CPU `FusedAdam` is replaced by `torch.optim.AdamW` through DeepSpeed's own `torch_adam` optimizer option, the
  same AdamW update, and one of ZeRO's supported optimizers. A run with `--adam_offload` keeps DeepSpeed's CPU
  Adam as asked.
"""

from __future__ import annotations


def skip_jit_ops() -> None:
    """In a trainer process, before DeepSpeed starts its communication backend or builds an optimizer (idempotent)."""
    import deepspeed.ops
    from openrlhf.utils.deepspeed import deepspeed as strategy
    from openrlhf.utils.deepspeed import deepspeed_utils

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    real = deepspeed_utils.get_train_ds_config
    if getattr(real, "torch_adam_shim", False):
        return

    def get_train_ds_config(*args, **kwargs):
        config = real(*args, **kwargs)
        optimizer = config.get("optimizer") or {}
        offloaded = config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none") != "none"
        if optimizer.get("type") in ("Adam", "AdamW") and not offloaded:
            optimizer.setdefault("params", {})["torch_adam"] = True
        return config

    get_train_ds_config.torch_adam_shim = True
    deepspeed_utils.get_train_ds_config = get_train_ds_config
    strategy.get_train_ds_config = get_train_ds_config  # DeepspeedStrategy calls the name it imported
