"""OpenRLHF 0.11.2's own command modules, run in this process as `python -m` would run them.

`asearcher train` runs `openrlhf.cli.train_ppo_ray` (asearcher_plugin/launch.py) and `asearcher sft` runs
`openrlhf.cli.train_sft` (asearcher_plugin/sft/train.py), the latter with two names of OpenRLHF's replaced first:
`SFTDataset` and `blending_datasets`, so that its trainer reads `asearcher sft-data` rows as they are.
"""

from __future__ import annotations

import runpy
import sys

PPO = "openrlhf.cli.train_ppo_ray"
SFT = "openrlhf.cli.train_sft"


def run_command(module: str, argv: list[str]) -> None:
    """OpenRLHF's command `module` with `argv`, run as `__main__`; sys.argv is restored after it."""
    saved = sys.argv
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=False)
    finally:
        sys.argv = saved


def use_sft_dataset(dataset_class, blend) -> None:
    """`train_sft` builds its datasets with `dataset_class` in place of `SFTDataset` and reads `--data.dataset` with
    `blend` in place of `blending_datasets`: the two names it looks up in `openrlhf.datasets` at run time."""
    import openrlhf.datasets
    import openrlhf.datasets.utils

    openrlhf.datasets.SFTDataset = dataset_class
    openrlhf.datasets.utils.blending_datasets = blend
