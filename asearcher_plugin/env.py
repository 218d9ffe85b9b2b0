"""The agent file OpenRLHF loads with `--train.agent_func_path`.

OpenRLHF's rollout actor imports this file by path and builds `AgentExecutor()` with no arguments; the
configuration comes from the launcher ($ASEARCHER_RUN_CONFIG in Ray's runtime env, read first), the YAML file named
by $ASEARCHER_CONFIG, or a per-run agent file (`python -m asearcher_plugin.env --config run.yaml`, see
agent_file.py); with none of them it refuses to start rather than run on defaults. The agent itself lives in
`asearcher_plugin.agent`: `AgentInstance` (one trajectory's state, agent/instance.py) and `AgentExecutor` (the
token loop, agent/executor.py). Neither vLLM nor Ray is imported here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from asearcher_plugin.agent.executor import NO_STREAMING, AgentExecutor
from asearcher_plugin.agent.instance import AgentInstance
from asearcher_plugin.settings.config import ConfigError

__all__ = ["AgentExecutor", "AgentInstance", "agent_file", "main"]


def agent_file() -> Path:
    return Path(__file__).resolve()


def main(argv: list[str]) -> None:
    """No arguments: this file (the config must then reach the actors another way). `--config run.yaml [--out
    FILE]`: a per-run agent file carrying the config, for the plain OpenRLHF command."""
    if not argv:
        print(agent_file())
        return
    if argv[0] != "--config" or len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--out"):
        raise SystemExit("usage: python -m asearcher_plugin.env [--config run.yaml [--out agent.py]]")
    from asearcher_plugin.agent_file import write
    from asearcher_plugin.recipe import RecipeError

    try:
        path = write(argv[1], argv[3] if len(argv) == 4 else None)
    except (RecipeError, ConfigError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(NO_STREAMING, file=sys.stderr)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
