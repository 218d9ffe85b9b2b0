"""OpenRLHF 0.11.2's real training orchestration on a machine without a GPU.

`activate()` replaces exactly what needs CUDA, at the narrowest point, and nothing else:

| replaced | by | why |
|---|---|---|
| the `vllm` package | `stand_ins/vllm`: `HFEngine` (transformers, CPU) behind `AsyncLLMEngine` | vLLM needs CUDA; OpenRLHF's `RolloutRayActor`, agent loading and `create_vllm_engines` run unchanged on top |
| `flash_attn` | `stand_ins/flash_attn`, import-only | imported at module level by `openrlhf.models`; only called with ring attention |
| `PolicyModelActor` | `CPUPolicyModelActor` | DeepSpeed ZeRO needs CUDA; the stand-in runs OpenRLHF's `Actor` and `PolicyLoss` with AdamW |
| `ReferenceModelActor` | `CPUReferenceModelActor` | same; forward only |
| NCCL weight broadcast | gloo, same calls (`init_process_group`, one `update_weight` per tensor) | NCCL needs CUDA |

OpenRLHF's parser, `train()`, `PPOTrainerAsync` / `PPOTrainer`, `GenerateSamplesActor`,
`TrainingActor`, experience making, advantages, checkpoint/resume bookkeeping, the slot and
rollout queues and the vLLM lock all run as they do on GPUs, in Ray actors with logical GPUs.
DeepSpeed itself must be importable (OpenRLHF imports it everywhere); it is never asked to
initialise an engine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

STAND_INS = Path(__file__).resolve().parent / "stand_ins"
# Logical resources for Ray: OpenRLHF asks for GPUs and CPUs per actor, nothing runs on a GPU.
RAY_RESOURCES = {"num_cpus": 16, "num_gpus": 8}


def use_stand_ins() -> None:
    """`import vllm` / `import flash_attn` find the stand-ins, here and in Ray workers started afterwards."""
    if str(STAND_INS) not in sys.path:
        sys.path.insert(0, str(STAND_INS))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(STAND_INS) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(STAND_INS), *paths])
    os.environ.setdefault("DS_ACCELERATOR", "cpu")


def activate() -> dict:
    """The stand-ins, and the CPU model actors where `train()` looks them up. Returns the `ray.init`
    resources to start Ray with."""
    use_stand_ins()

    import ray
    from openrlhf.trainer.ray import launcher, ppo_actor

    from .policy_actor import CPUPolicyModelActor, CPUReferenceModelActor

    ppo_actor.PolicyModelActor = ray.remote(num_gpus=1)(CPUPolicyModelActor)
    launcher.ReferenceModelActor = ray.remote(num_gpus=1)(CPUReferenceModelActor)
    return dict(RAY_RESOURCES)


def check_args(args) -> None:
    """What the stand-ins cannot do, refused before any actor starts."""
    problems = []
    if args.critic.model_name_or_path:
        problems.append("a critic (no CPU stand-in for CriticModelActor; use a group estimator such as group_norm)")
    if not args.reward.remote_url:
        problems.append("a reward model (use --train.agent_func_path or --reward.remote_url)")
    if args.ds.ring_attn_size > 1 or args.ds.tensor_parallel_size > 1 or args.vllm.tensor_parallel_size > 1:
        problems.append("ring attention or tensor parallelism")
    if args.actor.num_nodes * args.actor.num_gpus_per_node != 1:
        problems.append("more than one policy actor (set --actor.num_gpus_per_node 1)")
    if problems:
        raise ValueError("the CPU harness cannot run " + "; ".join(problems))
