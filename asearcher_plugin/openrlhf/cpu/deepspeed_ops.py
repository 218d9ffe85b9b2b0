"""DeepSpeed's two C++ ops that its CPU accelerator compiles on first use, left unbuilt.

A fresh environment compiled both in the first training run: `deepspeed_shm_comm` in 91 s and the CPU `fused_adam`
in 133 s on CI's 2 cores, and again whenever another environment had replaced them in the shared build cache.
Neither is on a GPU's path, and neither changes what is computed:

- `deepspeed_shm_comm` backs only `inference_all_reduce` (DeepSpeed-Inference's tensor parallelism); training
  all-reduces through gloo either way. It is marked incompatible, as DeepSpeed marks it off Linux;
- the CPU `FusedAdam` is replaced by `torch.optim.AdamW` through DeepSpeed's own `torch_adam` optimizer option, the
  same AdamW update, and one of ZeRO's supported optimizers. A run with `--adam_offload` keeps DeepSpeed's CPU
  Adam as asked.

An op that is still built (DeepSpeed's CPU Adam with `--adam_offload`) waits, as torch builds every extension, on a
lock file in the build cache; torch waits for it silently, forever when an interrupted build left it. The wait says
so after `BUILD_LOCK_WARN_S` seconds, with the file and what to do.
"""

from __future__ import annotations

import os
import sys
import time

BUILD_LOCK_WARN_S = 10.0


def skip_jit_ops() -> None:
    """In a trainer process, before DeepSpeed starts its communication backend or builds an optimizer (idempotent)."""
    import deepspeed.ops

    from .ds_configs import wrap_builders

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    name_build_locks()

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


def name_build_locks(warn_after: float = BUILD_LOCK_WARN_S) -> None:
    """torch's extension build waits on another build's lock file in silence: say which file, once (idempotent)."""
    import torch.utils.cpp_extension as extensions

    if getattr(extensions.FileBaton, "names_its_lock", False):
        return

    class NamedBaton(extensions.FileBaton):
        names_its_lock = True

        def wait(self) -> None:
            started, said = time.monotonic(), False
            while os.path.exists(self.lock_file_path):
                time.sleep(self.wait_seconds)
                if not said and time.monotonic() - started > warn_after:
                    waited = time.monotonic() - started
                    print(
                        f"waiting {waited:.0f} s so far for the build lock {self.lock_file_path}: another process is "
                        "compiling this DeepSpeed op, or a build was interrupted and left the lock; if no build runs, "
                        "delete that file",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True

    extensions.FileBaton = NamedBaton
