"""`asearcher train RECIPE`: a recipe (a packaged name or a YAML path) becomes an OpenRLHF run with the plugin's
agent and scheduler.

`python -m asearcher_plugin.launch --config run.yaml [--agent asearcher_plugin.env] <OpenRLHF flags>`
does the same for users who keep their own flags; `run.yaml` holds `agent:` and `scheduler:`.

The run config is validated here, then travels as JSON in Ray's runtime env
(`ASEARCHER_RUN_CONFIG`): the rollout actors read the agent config from it on every node, and
the scheduler settings are baked into the generator actor class that `install()` puts in place
before OpenRLHF's `train()` creates its actors. OpenRLHF builds its parser under `__main__`, so
the run goes through `runpy` with the assembled argv: its own parser, checks and `train()`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from .actor_watch import ActorWatch
from .openrlhf.args import RecipeFlagError
from .openrlhf.commands import PPO, run_command
from .openrlhf.run_end import note_run_ended
from .recipe import Recipe, RecipeError, agent_path, check_run, read_run_file
from .settings.config import CONFIG_ENV, RUN_CONFIG_ENV, ConfigError, RunConfig, load_run_config_env


class LaunchError(ValueError):
    pass


def rollout_failure(exc: BaseException) -> BaseException | None:
    """The scheduler's FatalRolloutError (an outage over budget, a dead engine) that ended a run, as raised in the
    generator actor; Ray hands it to the driver wrapped in a RayTaskError (`cause`) or chained."""
    from .scheduler.errors import FatalRolloutError

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        cause = getattr(exc, "cause", None)
        if isinstance(cause, FatalRolloutError):
            return cause
        if isinstance(exc, FatalRolloutError) and not hasattr(exc, "cause"):
            return exc
        exc = cause or exc.__cause__ or exc.__context__
    return None


def build_command(recipe: str, overrides: list[str]) -> tuple[list[str], RunConfig]:
    """A recipe (name or path) with `--set` overrides -> OpenRLHF's argv and the run config."""
    model = Recipe.load(recipe, overrides)
    return model.argv(), model.run_config()


def runtime_env_vars(config: RunConfig) -> dict:
    """OpenRLHF's own defaults (it sets them only when it starts Ray itself) plus the run config."""
    return {
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
        "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
        RUN_CONFIG_ENV: config.model_dump_json(),
    }


# Flags naming files the job reads on the cluster (a name that is no local path is a hub name, left alone), and
# folders it writes (made absolute whether or not they exist yet: they are made by the run).
PATH_FLAGS = ("--data.prompt_dataset", "--eval.dataset", "--actor.model_name_or_path")
OUTPUT_FLAGS = ("--ckpt.path", "--ckpt.output_dir")
# What the job's working directory leaves out when Ray uploads it: runs, caches and environments, not the job's code.
UPLOAD_EXCLUDES = ["runs/", ".git/", ".venv/", "venv/", "__pycache__/", "*.faiss", "*.sqlite", "*.safetensors"]


def ray_job_command(argv: list[str], config: RunConfig) -> str:
    """The same run on a cluster: the config rides in the job's runtime env, the entrypoint installs the scheduler.

    The packaged agent file is left for the entrypoint to find where the job runs (this machine's site-packages
    path means nothing there). A relative path that exists here, and every output folder, is made absolute: the job
    runs in Ray's copy of this directory (`working_dir`, uploaded without runs and environments), so the files must
    be at those paths on the cluster's nodes (shared storage)."""
    argv = list(argv)
    if "--train.agent_func_path" in argv:
        i = argv.index("--train.agent_func_path")
        if argv[i + 1] == agent_path("asearcher_plugin.env"):
            del argv[i : i + 2]
    for i, flag in enumerate(argv[:-1]):
        if os.path.isabs(argv[i + 1]):
            continue
        if flag in OUTPUT_FLAGS or (flag in PATH_FLAGS and os.path.exists(argv[i + 1])):
            argv[i + 1] = os.path.abspath(argv[i + 1])
    runtime = json.dumps(
        {
            "working_dir": os.getcwd(),
            "excludes": UPLOAD_EXCLUDES,
            "env_vars": {RUN_CONFIG_ENV: config.model_dump_json()},
        }
    )
    return (
        f"ray job submit --address $RAY_ADDRESS --runtime-env-json {shlex.quote(runtime)} -- "
        f"python -m asearcher_plugin.launch {shlex.join(argv)}"
    )


def check_cluster_gpus(args) -> None:
    """Refuses flags that ask for more GPUs than the Ray cluster has: OpenRLHF would wait on a placement group."""
    import ray

    from .openrlhf.fit import describe, gpus_asked

    asked = gpus_asked(args)
    have = ray.cluster_resources().get("GPU", 0)
    if sum(asked.values()) > have:
        ray.shutdown()
        raise LaunchError(
            f"the flags ask for {sum(asked.values())} GPUs ({describe(asked)}) and the Ray cluster has {have:g}: "
            "OpenRLHF would wait for a placement group forever"
        )


def run_openrlhf(argv: list[str], config: RunConfig, cpu: bool = False) -> None:
    """Checks the flags with OpenRLHF's own parser, starts Ray, installs the scheduler, runs `train()`.

    `cpu`: OpenRLHF's real training on CPU, with its CUDA calls redirected (`asearcher_plugin.openrlhf.cpu`).
    """
    resources = {}
    if cpu:
        from .openrlhf import cpu as openrlhf_cpu

        try:
            resources = openrlhf_cpu.activate()  # before anything imports vLLM or starts Ray workers
        except openrlhf_cpu.HarnessMissing as exc:
            raise LaunchError(str(exc)) from None
    try:
        args, settings = check_run(argv, config.scheduler, config.agent.training_sequences)
        if cpu:
            openrlhf_cpu.check_args(args)
    except RecipeFlagError:
        raise
    except ValueError as exc:  # scheduler settings that cannot stream, or flags the CPU harness cannot run
        raise LaunchError(str(exc)) from None
    if settings is None and config.scheduler.enable:
        print(
            "asearcher: --train.async_enable is off: OpenRLHF's synchronous trainer and generator run, without "
            "the streaming scheduler",
            file=sys.stderr,
        )
    env = runtime_env_vars(config)
    os.environ.update(env)
    import ray

    if not ray.is_initialized():  # OpenRLHF then skips its own ray.init
        ray.init(runtime_env={"env_vars": env}, **resources)
    check_cluster_gpus(args)
    if settings is not None:
        from .openrlhf.streaming import install

        tools = config.agent.tools
        install(
            settings,
            per_call=config.agent.training_sequences == "per_call",
            kb_urls=tuple(tools.local.urls) if tools.backend == "local" else (),
        )
    watch = ActorWatch()
    watch.start()
    try:
        run_command(PPO, argv)
    except KeyboardInterrupt:
        if watch.failure is None:
            raise
        raise LaunchError(f"{watch.failure} (the run was stopped: OpenRLHF would wait for it forever)") from None
    finally:  # stop the actors here rather than from interpreter-exit hooks
        watch.stop()
        ray.shutdown()
        note_run_ended()


def config_for_launch(path: str | None) -> RunConfig:
    """--config FILE, else the run config a `ray job submit` carried, else $ASEARCHER_CONFIG; never silent defaults."""
    try:
        if path:
            return read_run_file(path)
        if os.environ.get(RUN_CONFIG_ENV):
            return load_run_config_env()
        if os.environ.get(CONFIG_ENV):
            return read_run_file(os.environ[CONFIG_ENV])
    except (ConfigError, ValueError) as exc:
        raise LaunchError(str(exc)) from None
    raise LaunchError(
        "no agent config: pass --config run.yaml (with `agent:` and optionally `scheduler:` sections), "
        "or use `asearcher train RECIPE.yaml`"
    )


def main(args: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if args is None else args)
    agent, config, cpu = "asearcher_plugin.env", None, False
    try:
        for flag in ("--agent", "--config"):
            if flag in args:
                i = args.index(flag)
                if i + 1 >= len(args):
                    raise LaunchError(f"{flag} needs a value")
                value = args[i + 1]
                del args[i : i + 2]
                agent, config = (value, config) if flag == "--agent" else (agent, value)
        if "--cpu" in args:
            args.remove("--cpu")
            cpu = True
        if "--train.agent_func_path" not in args:
            args += ["--train.agent_func_path", agent_path(agent)]
        run_openrlhf(args, config_for_launch(config), cpu=cpu)
    except (LaunchError, RecipeError, RecipeFlagError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
