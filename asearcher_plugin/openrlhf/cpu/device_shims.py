"""The CUDA-only calls of OpenRLHF's trainer actors, pointed at the CPU inside those actors' processes.

OpenRLHF's `PolicyModelActor`, `ReferenceModelActor`, `ActorPPOTrainer`, `DeepspeedStrategy` and replay buffer run
as they are; DeepSpeed runs on its CPU accelerator (`DS_ACCELERATOR=cpu`, gloo). What they call of CUDA by name is
redirected in the modules that call it, not in torch itself:

| replaced | by | why |
|---|---|---|
| `torch.cuda.{set_device, current_device, current_stream, synchronize, empty_cache}` | `"cpu"`, no-op | no CUDA |
| `torch.device("cuda:N")` (the replay buffer's target device) | `torch.device("cpu")` | same |
| `init_device_mesh("cuda", ...)` in `DeepspeedStrategy.setup_distributed` | the same mesh on `"cpu"` (gloo) | same |
| `torch_dist_barrier_and_cuda_sync` in `ppo_actor` and `DeepspeedStrategy` | the barrier alone | same |
| `stateless_init_process_group` (PyNccl) in `_init_vllm_sync_group` | `vllm_transport` gloo group | NCCL needs CUDA |

The modules: `openrlhf.trainer.ray.launcher`, `.ppo_actor`, `openrlhf.trainer.ppo_utils.replay_buffer`,
`openrlhf.utils.deepspeed.deepspeed` and `.deepspeed_utils`. Everything else they do, and every other module, sees
the real torch.
"""

from __future__ import annotations

import importlib
import types

MODULES = (
    "openrlhf.trainer.ray.launcher",
    "openrlhf.trainer.ray.ppo_actor",
    "openrlhf.trainer.ppo_utils.replay_buffer",
    "openrlhf.utils.deepspeed.deepspeed",
    "openrlhf.utils.deepspeed.deepspeed_utils",
)


def _cpu_cuda():
    def nothing(*args, **kwargs):
        return None

    return types.SimpleNamespace(
        set_device=nothing,
        current_device=lambda: "cpu",
        current_stream=nothing,
        synchronize=nothing,
        empty_cache=nothing,
        is_available=lambda: False,
    )


class CpuTorch(types.ModuleType):
    """`torch` with a CPU `cuda` and `device("cuda...")` meaning the CPU; every other name is torch's own."""

    def __init__(self):
        import torch

        super().__init__("torch")
        self._torch = torch
        self.cuda = _cpu_cuda()

    def device(self, spec, *args):
        if isinstance(spec, str) and spec.startswith("cuda"):
            return self._torch.device("cpu")
        return self._torch.device(spec, *args)

    def __getattr__(self, name):
        return getattr(self._torch, name)


def _barrier() -> None:
    import torch.distributed

    torch.distributed.barrier()


def install(actor_class: type | None = None) -> None:
    """Called first thing in each trainer actor process (idempotent).

    `actor_class`: the Ray actor class the process runs. Ray ships an actor class from the driver by value, so its
    methods carry their own copy of their module's globals; those copies get the same replacements.
    """
    if not getattr(install, "done", False):
        from openrlhf.trainer.ray import ppo_actor
        from openrlhf.utils.deepspeed import deepspeed as ds_strategy

        from .vllm_transport import stateless_init_process_group

        real_mesh = ds_strategy.init_device_mesh

        def init_device_mesh(device_type, *args, **kwargs):
            return real_mesh("cpu", *args, **kwargs)

        for name in MODULES:
            _replace(vars(importlib.import_module(name)))
        ds_strategy.init_device_mesh = init_device_mesh
        ppo_actor.stateless_init_process_group = stateless_init_process_group
        install.done = True
    for cls in actor_class.__mro__ if actor_class else ():
        for value in vars(cls).values():
            if isinstance(value, types.FunctionType) and value.__module__ in MODULES:
                _replace(value.__globals__)


def _replace(namespace: dict) -> None:
    if namespace.get("torch") is not None and not isinstance(namespace["torch"], CpuTorch):
        namespace["torch"] = CPU_TORCH
    if "torch_dist_barrier_and_cuda_sync" in namespace:
        namespace["torch_dist_barrier_and_cuda_sync"] = _barrier


CPU_TORCH = CpuTorch()
