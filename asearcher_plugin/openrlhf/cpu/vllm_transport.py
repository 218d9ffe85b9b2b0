"""OpenRLHF's trainer -> vLLM weight broadcast, over gloo on CPU instead of NCCL.

OpenRLHF's own code runs on both ends: the trainer's `_init_vllm_sync_group` / `broadcast_to_vllm` and the
engine's `WorkerWrap.init_process_group` / `update_weight` (its vLLM `worker_extension_cls`), which still hands
every tensor to vLLM's `model.load_weights`. Only the transport under them is replaced:

- `openrlhf.utils.distributed_util.stateless_init_process_group` (a PyNccl communicator) -> a stateless gloo group
  with the same `broadcast(tensor, src, stream)` call; rank 0 is the trainer, engine i is rank i + 1;
- `WorkerWrap.update_weight`: its receive buffer is `torch.empty(..., device="cuda")`; here it is a CPU tensor.
  The tensor arrives in the trainer's dtype and vLLM's weight loaders copy it into the engine's parameters;
- vLLM's CPU GEMM dispatch (`dispatch_cpu_unquantized_gemm`): on CPUs with oneDNN or AMX kernels it packs each
  linear layer's weight into a kernel-owned copy and replaces the parameter by an empty one without its
  `weight_loader`, so weights can no longer be updated in place (`load_weights` raises "'Parameter' object has no
  attribute 'weight_loader'", and a packed lm_head would keep its old copy). The harness keeps every weight and
  uses vLLM's own fallback, `torch.nn.functional.linear` on the live parameter, as vLLM does on CPUs without
  those kernels. GPU engines never take this path.

The engine side runs in vLLM's spawned engine-core worker, which a patch in the Ray actor cannot reach. vLLM loads
the `vllm.general_plugins` entry points in every worker before it mixes in the worker extension class, so
`register` (this package's entry point) applies the patch there, and only when the CPU harness asked for it
(`ASEARCHER_CPU_HARNESS=1`, which the harness puts in Ray's runtime env).
"""

from __future__ import annotations

import os
from datetime import timedelta

HARNESS_ENV = "ASEARCHER_CPU_HARNESS"
TIMEOUT = timedelta(seconds=300)


class GlooBroadcastGroup:
    """A stateless gloo group (its own TCP store), so it never touches a process's default group."""

    def __init__(self, master_address: str, master_port: int, rank: int, world_size: int):
        import torch.distributed as dist

        store = dist.TCPStore(master_address, int(master_port), world_size, is_master=rank == 0, timeout=TIMEOUT)
        self.group = dist.ProcessGroupGloo(store, rank, world_size, TIMEOUT)

    def broadcast(self, tensor, src: int, stream=None) -> None:
        self.group.broadcast(tensor, src).wait()


def stateless_init_process_group(master_address, master_port, rank, world_size, device=None) -> GlooBroadcastGroup:
    return GlooBroadcastGroup(master_address, master_port, rank, world_size)


def update_weight(self, name, dtype, shape, empty_cache=False):
    """`WorkerWrap.update_weight` with a CPU receive buffer; OpenRLHF's dtype check kept, since a trainer whose
    dtype differs from the engines' fails there on GPUs, and vLLM's loaders would cast it silently here."""
    import torch

    assert dtype == self.model_config.dtype, f"mismatch dtype: src {dtype}, dst {self.model_config.dtype}"
    weight = torch.empty(shape, dtype=dtype)
    self._model_update_group.broadcast(weight, src=0)
    from .switches import switches

    if not switches().skip_weight_load:  # the learning benchmark's control: broadcasts received, not loaded
        self.model_runner.model.load_weights(weights=[(name, weight)])
    del weight


def _plain_linear(x, weight, bias):
    import torch

    return torch.nn.functional.linear(x, weight, bias)


def keep_weights_gemm(layer, remove_weight: bool) -> None:
    """vLLM's CPU GEMM dispatch for 2-D weights, always on its plain fallback: the weight stays a loadable
    parameter and every call multiplies by its current value. Other layers (MoE, conv) keep vLLM's dispatch."""
    if layer.weight.is_meta or layer.weight.ndim == 2:
        layer.cpu_linear = _plain_linear
        return
    _VLLM_GEMM_DISPATCH["fn"](layer, remove_weight)


_VLLM_GEMM_DISPATCH: dict = {}


def register() -> None:
    """The `vllm.general_plugins` entry point: patches the engine side when the CPU harness runs."""
    if os.environ.get(HARNESS_ENV) != "1":
        return
    from openrlhf.trainer.ray import vllm_worker_wrap
    from openrlhf.utils import distributed_util
    from vllm.model_executor.layers import utils as layer_utils

    distributed_util.stateless_init_process_group = stateless_init_process_group
    vllm_worker_wrap.WorkerWrap.update_weight = update_weight
    if layer_utils.dispatch_cpu_unquantized_gemm is not keep_weights_gemm:  # linear.py imports it at each call
        _VLLM_GEMM_DISPATCH["fn"] = layer_utils.dispatch_cpu_unquantized_gemm
        layer_utils.dispatch_cpu_unquantized_gemm = keep_weights_gemm
