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

    from .ds_configs import wrap_builders

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

    def with_torch_adam(real):
        def get_train_ds_config(*args, **kwargs):
            config = real(*args, **kwargs)
            optimizer = config.get("optimizer") or {}
            offloaded = config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none")
            if optimizer.get("type") in ("Adam", "AdamW") and offloaded == "none":
                optimizer.setdefault("params", {})["torch_adam"] = True
            return config

        return get_train_ds_config

    wrap_builders(with_torch_adam, "torch_adam", names=("get_train_ds_config",))
