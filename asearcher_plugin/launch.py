"""`asearcher train RECIPE.yaml`: a recipe becomes an OpenRLHF run with the plugin's agent.

`python -m asearcher_plugin.launch --agent asearcher_plugin.env <OpenRLHF flags>` does the same
for users who keep their own flags. OpenRLHF builds its parser under `__main__`, so the run goes
through `runpy` with the assembled argv.
"""

from __future__ import annotations

import json
import os
import runpy
import shlex
import sys
from pathlib import Path

from .config import CONFIG_ENV
from .recipe import load_recipe, openrlhf_argv, write_agent_config


def agent_path(spec: str) -> str:
    """`asearcher_plugin.env` (a module) or a path to a .py file -> the file OpenRLHF should load."""
    if spec.endswith(".py"):
        return str(Path(spec).resolve())
    import importlib.util

    found = importlib.util.find_spec(spec)
    if found is None or not found.origin:
        raise SystemExit(f"--agent {spec}: no such module")
    return found.origin


def build_command(recipe_path: str, overrides: list[str], run_dir: Path) -> tuple[list[str], dict]:
    recipe = load_recipe(recipe_path, overrides)
    config = write_agent_config(recipe, run_dir / "agent.yaml")
    argv = openrlhf_argv(recipe["openrlhf"]) + ["--train.agent_func_path", agent_path("asearcher_plugin.env")]
    sched = recipe.get("scheduler") or {}
    env = {CONFIG_ENV: str(config.resolve())}
    for key in ("max_concurrent", "max_staleness"):
        if key in sched:
            env[f"ASEARCHER_{key.upper()}"] = str(sched[key])
    return argv, env


def ray_job_command(argv: list[str], env: dict) -> str:
    runtime = json.dumps({"env_vars": env})
    return (f"ray job submit --address $RAY_ADDRESS --runtime-env-json {shlex.quote(runtime)} -- "
            f"python -m openrlhf.cli.train_ppo_ray {shlex.join(argv)}")


SETUP_HOOK = "asearcher_plugin.scheduler.openrlhf.install"


def run_openrlhf(argv: list[str], env: dict, streaming: bool = True) -> None:
    """Starts Ray with the streaming scheduler installed in every worker, then OpenRLHF's own CLI.

    OpenRLHF only calls `ray.init` when Ray is not initialised, so initialising it here with a
    `worker_process_setup_hook` is how the generator actor (a separate worker process) gets the
    streaming generator. Its env vars are OpenRLHF's defaults plus the agent config.
    """
    os.environ.update(env)
    if streaming:
        import ray

        env_vars = {"TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
                    "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
                    "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"), **env}
        ray.init(runtime_env={"worker_process_setup_hook": SETUP_HOOK, "env_vars": env_vars})
    sys.argv = ["openrlhf.cli.train_ppo_ray", *argv]
    runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")


def main(args: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if args is None else args)
    agent = "asearcher_plugin.env"
    if "--agent" in args:
        i = args.index("--agent")
        agent = args[i + 1]
        del args[i : i + 2]
    run_openrlhf([*args, "--train.agent_func_path", agent_path(agent)], {})


if __name__ == "__main__":
    main()
