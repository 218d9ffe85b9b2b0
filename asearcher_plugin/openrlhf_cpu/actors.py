"""OpenRLHF's own policy and reference actors, started in processes whose CUDA calls point at the CPU.

Each class here is OpenRLHF's actor class itself with one addition: `device_shims.install()` runs in the actor's
process before OpenRLHF's `__init__`. The policy actor also keeps a record of what each update trained on
(`cpu_harness_fits.jsonl` beside the checkpoints), which the tests and benchmarks read; it observes `append` and
`fit` and changes nothing they do.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import ray
import torch

FIT_LOG = "cpu_harness_fits.jsonl"
FIT_SECONDS_ENV = "ASEARCHER_CPU_FIT_SECONDS"  # benchmarks: a GPU-sized training step on top of the real one


def original_class(actor_class):
    """The class under a `@ray.remote` decoration."""
    return actor_class.__ray_metadata__.modified_class.__ray_actor_class__


def on_cpu(actor_class, *mixins):
    """`actor_class` (a Ray actor class of OpenRLHF's) re-decorated, with the shims installed first in its process."""
    base = original_class(actor_class)

    def __init__(self, *args, **kwargs):
        from .device_shims import install

        install(type(self))
        base.__init__(self, *args, **kwargs)

    cls = type(base.__name__, (*mixins, base), {"__init__": __init__, "__module__": __name__})
    return ray.remote(num_gpus=1)(cls)


class FitLog:
    """What each update trained on, one JSON line per `fit`: prompts, sample count and the per-sample info."""

    def append(self, experience):
        rows = self.__dict__.setdefault("_fit_rows", [])
        rows.append(
            {
                "prompts": list(experience.prompts),
                "samples": int(experience.sequences.shape[0]),
                "info": {k: v.flatten().tolist() for k, v in experience.info.items() if isinstance(v, torch.Tensor)},
            }
        )
        return super().append(experience)

    def fit(self, kl_ctl: float = 0):
        status = super().fit(kl_ctl)
        time.sleep(float(os.environ.get(FIT_SECONDS_ENV, "0") or 0))
        self._fits = getattr(self, "_fits", 0) + 1
        path = Path(self.strategy.args.ckpt.path)
        path.mkdir(parents=True, exist_ok=True)
        line = {
            "fit": self._fits,
            "time": time.time(),
            "status": {k: v for k, v in status.items() if isinstance(v, (int, float))},
            "experiences": self.__dict__.pop("_fit_rows", []),
        }
        with open(path / FIT_LOG, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
        return status
