"""The CPU harness's switches for this run (`cpu_harness:` in the run config, `--set cpu_harness.X=...`), read in
whichever actor needs them: the run config reaches every actor of the run in its environment."""

from __future__ import annotations

import os
from functools import cache

from asearcher_plugin.settings.config import RUN_CONFIG_ENV, CpuHarnessConfig, load_run_config_env


@cache
def switches() -> CpuHarnessConfig:
    if not os.environ.get(RUN_CONFIG_ENV):  # a process outside a launched run: none set
        return CpuHarnessConfig()
    return load_run_config_env().cpu_harness
