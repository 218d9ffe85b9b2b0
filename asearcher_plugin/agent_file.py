"""A per-run agent file for the plain OpenRLHF command, carrying the run's agent config.

`python -m openrlhf.cli.train_ppo_ray --train.agent_func_path $(python -m asearcher_plugin.env --config run.yaml)`

OpenRLHF's rollout actors load the agent file by path on every node, while environment variables of the
submitting shell reach them only when OpenRLHF starts Ray itself on one machine (its `ray.init` forwards three
variables of its own; a pre-started cluster gets none). So the config rides in the file: `write()` validates
`run.yaml` and writes a small module next to it whose `AgentExecutor` is built with that config. The path must be
readable by every node (shared storage), like the dataset. This path runs OpenRLHF's own generator: the streaming
scheduler is installed only by `asearcher train` / `python -m asearcher_plugin.launch`, and both say so.
"""

from __future__ import annotations

from pathlib import Path

from asearcher_plugin.agent.executor import NO_STREAMING, PER_CALL_NEEDS_SCHEDULER  # noqa: F401 - named here too

TEMPLATE = '''"""Per-run agent file for OpenRLHF (--train.agent_func_path), written by `python -m asearcher_plugin.env
--config {source}`. The agent config below is that run's; edit the YAML and write this file again."""

from asearcher_plugin.settings.config import RunConfig
from asearcher_plugin.env import AgentExecutor as _AgentExecutor

RUN_CONFIG = {config!r}


class AgentExecutor(_AgentExecutor):
    def __init__(self):
        super().__init__(RunConfig.model_validate_json(RUN_CONFIG).agent, check_kb=True, without_launcher=True)
'''


def write(config_path: str | Path, out: str | Path | None = None) -> Path:
    """Validates `config_path` (a run config or a recipe) and writes the per-run agent file; returns its path."""
    from .recipe import read_run_file

    config_path = Path(config_path).resolve()
    run = read_run_file(config_path)
    out = Path(out) if out else config_path.with_name(f"{config_path.stem}_agent.py")
    out.write_text(TEMPLATE.format(source=config_path, config=run.model_dump_json()), encoding="utf-8")
    return out.resolve()
