"""A warm-start recipe for `asearcher sft --cpu`: the train_sft settings a CPU run needs around a model, an `sft-data`
dataset and where to write, plus the RL section that starts from what it writes."""

from __future__ import annotations

import json
from pathlib import Path

# DeepSpeed's CPU accelerator: no ZeRO partitioning to gain on one process, and flash-attn needs CUDA.
CPU_SETTINGS = {"ds.zero_stage": 0, "ds.attn_implementation": "sdpa", "data.max_len": 2048}


def write_cpu_recipe(path: Path, model: Path, dataset: Path, out: Path, ckpt: Path, **settings) -> Path:
    """A recipe at `path` whose `sft:` trains `model` on `dataset` into `out` (`settings`: more train_sft flags, dots
    as in the recipe, e.g. `**{"train.max_epochs": 4}`), and whose `openrlhf:` RL starts from `out`."""
    sft = {
        "model.model_name_or_path": str(model),
        "data.dataset": str(dataset),
        **CPU_SETTINGS,
        "ckpt.output_dir": str(out),
        "ckpt.path": str(ckpt),
        **settings,
    }
    path.write_text(json.dumps({"sft": sft, "openrlhf": {"actor.model_name_or_path": str(out)}}, indent=1) + "\n")
    return path
