"""OpenRLHF's own policy and reference actors, started in processes whose CUDA calls point at the CPU.

Each class here is OpenRLHF's actor class itself with one addition: `device_shims.install()` runs in the actor's
process before OpenRLHF's `__init__`. The policy actor also keeps a record of what each update trained on
(`cpu_harness_fits.jsonl` beside the checkpoints), which the tests and benchmarks read; it observes `append` and
`fit` and changes nothing they do.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import ray
import torch

FIT_LOG = "cpu_harness_fits.jsonl"


def original_class(actor_class):
    """The class under a `@ray.remote` decoration."""
    return actor_class.__ray_metadata__.modified_class.__ray_actor_class__


def redecorated(base, __init__, *mixins, **remote_options):
    """`base` (the class under an OpenRLHF actor's `@ray.remote`) under `@ray.remote(**remote_options)` again, with
    `__init__` (which calls the original's) and `mixins` in front of it."""
    cls = type(base.__name__, (*mixins, base), {"__init__": __init__, "__module__": __name__})
    return ray.remote(**remote_options)(cls) if remote_options else ray.remote(cls)


def on_cpu(actor_class, *mixins):
    """`actor_class` (a Ray actor class of OpenRLHF's) re-decorated, with the shims installed first in its process."""
    base = original_class(actor_class)

    def __init__(self, *args, **kwargs):
        from .deepspeed_ops import skip_jit_ops
        from .device_shims import install
        from .gloo_gathers import gather_in_order
        from .precision import train_in_fp32
        from .switches import switches
        from .zero3_loading import updatable_state_dict_groups

        install(type(self))
        skip_jit_ops()
        updatable_state_dict_groups()
        gather_in_order()
        if not switches().bf16:
            train_in_fp32()
        base.__init__(self, *args, **kwargs)

    return redecorated(base, __init__, *mixins, num_gpus=1)


# vLLM's CPU platform turns the engine's "uni" executor (what OpenRLHF asks for with one GPU per engine) into "mp",
# a further process for the worker that imports vLLM again (~25 s more a run on 2 cores). Off, the worker
# runs in the engine-core process, as on a GPU; AsyncLLM keeps its engine-core process either way.
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def engine_on_cpu(actor_class):
    """OpenRLHF's `RolloutRayActor` (`actor_class`), re-decorated to start its vLLM engine with the worker in the
    engine-core process (`ENGINE_ENV`) and in float32, the dtype the harness trains in (`precision`), unless the run
    asks for bf16 (`cpu_harness.bf16`)."""
    base = original_class(actor_class)

    async def __init__(self, *args, **kwargs):
        from .precision import engine_kwargs
        from .switches import switches

        os.environ.update(ENGINE_ENV)
        await base.__init__(self, *args, **(kwargs if switches().bf16 else engine_kwargs(kwargs)))

    return redecorated(base, __init__, EngineVersion)


class EngineVersion:
    """Counts the weight updates the engine took: OpenRLHF's `broadcast_to_vllm` sends every parameter through
    `update_weight` and marks the last with `empty_cache=True`. A call sent while the count is v ran on the weights
    after v broadcasts (or, mid-broadcast, on a mix of v and v + 1: counted as v, the older)."""

    asearcher_weight_version = 0

    async def update_weight(self, name, dtype, shape, empty_cache=False):
        result = await super().update_weight(name, dtype, shape, empty_cache=empty_cache)
        if empty_cache:
            self.asearcher_weight_version += 1
        return result


def info_values(value) -> list | None:
    """An experience's info entry as a flat list: a tensor, or (after OpenRLHF's `make_experience_batch`, which
    balancing across ranks calls) a list of one 0-d tensor per sample; None for anything else."""
    if isinstance(value, torch.Tensor):
        return value.flatten().tolist()
    if isinstance(value, list) and value and all(isinstance(v, (torch.Tensor, int, float)) for v in value):
        return [float(v) for v in value]
    return None


def engine_gap(experience) -> list[float | None] | None:
    """Per sample, the mean |log-prob| difference over its loss tokens between the trainer (its policy as the update
    starts) and the vLLM engine that generated the tokens: 0 up to numerics when the engine held the trainer's
    weights. None without the engine's log-probs; a sample without loss tokens gets None."""
    if experience.rollout_log_probs is None or experience.action_log_probs is None:
        return None
    diff = (experience.action_log_probs.float() - experience.rollout_log_probs.float()).abs()
    mask = experience.action_mask.bool()
    return [float(d[m].mean()) if m.any() else None for d, m in zip(diff, mask)]


class FitLog:
    """What each update trained on, one JSON line per `fit`: prompts, sample count, the per-sample info, the tokens
    each sample puts into the loss (its action mask as the trainer got it), and how many weight broadcasts to the
    engines came before it (the version it trains, counted as the engines count theirs: `EngineVersion`)."""

    def append(self, experience):
        rows = self.__dict__.setdefault("_fit_rows", [])
        rows.append(
            {
                "prompts": list(experience.prompts),
                "samples": int(experience.sequences.shape[0]),
                "loss_tokens": experience.action_mask.sum(-1).tolist(),
                # the advantage of each sample's first loss token (one value per sample with group estimators)
                "advantages": [
                    float(adv[mask.bool()][0]) if mask.any() else None
                    for adv, mask in zip(experience.advantages, experience.action_mask)
                ]
                if experience.advantages is not None
                else None,
                "info": {k: vals for k, v in experience.info.items() if (vals := info_values(v)) is not None},
                "engine_gap": engine_gap(experience),
            }
        )
        return super().append(experience)

    def broadcast_to_vllm(self):
        result = super().broadcast_to_vllm()
        self._broadcasts = getattr(self, "_broadcasts", 0) + 1
        return result

    def fit(self, kl_ctl: float = 0):
        started = time.time()
        # the weights this update trains from went to the engines as broadcast number `broadcasts` (0: the start's)
        broadcasts = getattr(self, "_broadcasts", 0)
        status = super().fit(kl_ctl)
        from asearcher_plugin.openrlhf.cpu.switches import switches

        time.sleep(switches().fit_seconds)  # benchmarks: a GPU-sized training step on top of the real one
        self._fits = getattr(self, "_fits", 0) + 1
        path = Path(self.strategy.args.ckpt.path)
        path.mkdir(parents=True, exist_ok=True)
        line = {
            "fit": self._fits,
            "rank": torch.distributed.get_rank() if torch.distributed.is_initialized() else 0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            # per_call: this rank's micro-batches (optimizer step, tokens as the forward pads them, padding or not)
            "micro_batches": getattr(self, "asearcher_micro_batches", None),
            "started": started,
            "broadcasts": broadcasts,
            "time": time.time(),
            "status": {k: v for k, v in status.items() if isinstance(v, (int, float))},
            "experiences": self.__dict__.pop("_fit_rows", []),
        }
        with open(path / FIT_LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
        return status


def read_fit_log(ckpt_path: str | Path) -> list[dict]:
    """The lines `FitLog` wrote under `ckpt_path`, in update order."""
    lines = (Path(ckpt_path) / FIT_LOG).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def step_rewards(ckpt_path: str | Path) -> list[float]:
    """Per update, the mean reward of the trajectories it trained on (all generated by the vLLM engines)."""
    means = []
    for fit in read_fit_log(ckpt_path):
        rewards = [r for exp in fit["experiences"] for r in exp["info"]["reward"]]
        means.append(sum(rewards) / len(rewards))
    return means
