"""Every recipe against the installed OpenRLHF 0.11.2: its own parser, types and argument checks."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from asearcher_plugin.config import AgentConfig
from asearcher_plugin.launch import build_command
from asearcher_plugin.openrlhf_args import RecipeFlagError, check_args, known_flags
from asearcher_plugin.recipe import RecipeError, load_recipe, openrlhf_argv
from asearcher_plugin.scheduler.settings import StreamingSettingsError, resolve_settings

RECIPES = sorted((Path(__file__).resolve().parent.parent / "recipes").glob("*.yaml"))


def test_there_are_the_recipes_users_expect():
    assert {p.stem for p in RECIPES} >= {"local_7b_1node", "local_14b_2nodes", "local_7b_16nodes", "web_qwq32b", "cpu_tiny"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_is_accepted_by_openrlhf(path, tmp_path):
    recipe = load_recipe(path)
    assert {"description", "resources", "agent", "openrlhf"} <= set(recipe)
    AgentConfig.model_validate(recipe["agent"])
    flags = known_flags()
    for name, value in recipe["openrlhf"].items():
        assert f"--{name}" in flags, f"{path.name}: --{name} is not an OpenRLHF 0.11.2 flag"
    argv, config = build_command(str(path), [])
    args = check_args(argv)
    assert args.train.agent_func_path.endswith("asearcher_plugin/env.py") and args.reward.remote_url == ["agent"]
    assert args.train.async_enable and args.train.partial_rollout_enable
    assert args.algo.advantage.is_correction_level == "token"  # rollout log-probs recorded for stale samples
    assert args.vllm.enable_prefix_caching  # every turn re-sends the trajectory
    assert not (args.data.apply_chat_template and config.agent.wrap_prompt)  # templated once
    assert config.agent == AgentConfig.model_validate(recipe["agent"])
    if recipe["resources"]["nodes"] > 1 and config.agent.tools.backend == "local":
        # rollout engines on other nodes cannot reach a KB on "their" loopback
        assert not any(h in u for u in config.agent.tools.local.urls for h in ("127.0.0.1", "localhost"))
    settings = resolve_settings(config.scheduler, args)
    # streaming headroom: batches admitted beyond what OpenRLHF's queue holds
    assert settings.max_staleness - args.train.async_queue_size >= 1
    assert settings.max_concurrent >= (settings.max_staleness + 1) * args.rollout.batch_size


def test_wrong_flags_are_refused_with_openrlhf_s_message():
    base = RECIPES[0]
    with pytest.raises(RecipeFlagError, match="invalid int value: 'many'"):
        check_args(build_command(str(base), ["openrlhf.rollout.batch_size=many"])[0])
    with pytest.raises(RecipeFlagError, match="unrecognized arguments: --rollout.batchsize"):
        check_args(build_command(str(base), ["openrlhf.rollout.batchsize=4"])[0])
    with pytest.raises(RecipeFlagError, match="partial_rollout_enable requires --train.async_enable"):
        check_args(build_command(str(base), ["openrlhf.train.async_enable=false"])[0])
    with pytest.raises(RecipeError, match="agent_type"):
        load_recipe(base, ["agent.agent_type=magic"])
    with pytest.raises(RecipeError, match="key=value"):
        load_recipe(base, ["nonsense"])


@pytest.mark.parametrize("override, message", [
    ("scheduler.max_concurrent=abc", "scheduler.max_concurrent"),
    ("scheduler.max_concurrent=0", "scheduler.max_concurrent"),
    ("scheduler.max_staleness=-3", "scheduler.max_staleness"),
    ("scheduler.max_stalenes=4", "max_stalenes"),
    ("scheduler.on_stale=drop", "scheduler.on_stale"),
    ("schedular.enable=true", "unknown section"),
])
def test_scheduler_section_is_validated(override, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(RECIPES[0], [override])


def test_chat_template_applied_twice_is_refused():
    web = next(p for p in RECIPES if p.stem == "web_qwq32b")
    with pytest.raises(RecipeError, match="apply_chat_template"):
        load_recipe(web, ["openrlhf.data.apply_chat_template=true"])
    assert load_recipe(web, ["openrlhf.data.apply_chat_template=true", "agent.wrap_prompt=false"])


def test_streaming_needs_partial_rollout_and_eta_at_least_the_queue():
    base = RECIPES[0]
    argv, config = build_command(str(base), ["openrlhf.train.partial_rollout_enable=false"])
    with pytest.raises(StreamingSettingsError, match="partial_rollout_enable"):
        resolve_settings(config.scheduler, check_args(argv))
    argv, config = build_command(str(base), ["openrlhf.train.async_queue_size=4", "scheduler.max_staleness=2"])
    with pytest.raises(StreamingSettingsError, match="max_staleness=2 < --train.async_queue_size=4"):
        resolve_settings(config.scheduler, check_args(argv))
    argv, config = build_command(str(base), ["scheduler.max_staleness=null", "openrlhf.train.async_queue_size=2"])
    assert resolve_settings(config.scheduler, check_args(argv)).max_staleness == 4  # default: queue + 2


def test_argv_rendering():
    assert openrlhf_argv({"a.b": True, "c": False, "d": [0.0, 5.0], "e": 3, "f": None}) == ["--a.b", "--d", "0.0", "5.0", "--e", "3"]


def test_train_print_cmd_and_dry_run():
    recipe = next(p for p in RECIPES if p.stem == "local_7b_1node")
    cli = [sys.executable, "-m", "asearcher_plugin.cli", "train", str(recipe)]
    out = subprocess.run([*cli, "--print-cmd", "--set", "agent.max_turns=16"], capture_output=True, text=True, check=True).stdout
    launcher, job = out.strip().splitlines()
    assert "python -m asearcher_plugin.launch" in launcher and "--train.agent_func_path" in launcher
    # the cluster form runs the launcher (which installs the scheduler), with the config in the job's runtime env
    assert job.startswith("ray job submit") and "-- python -m asearcher_plugin.launch" in job
    runtime = json.loads(shlex.split(job)[shlex.split(job).index("--runtime-env-json") + 1])
    run_config = json.loads(runtime["env_vars"]["ASEARCHER_RUN_CONFIG"])
    assert run_config["agent"]["max_turns"] == 16 and run_config["scheduler"]["max_staleness"] == 4
    ok = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True)
    assert ok.returncode == 0 and "accepted" in ok.stdout and "streaming scheduler: max_staleness 4" in ok.stdout
    bad = subprocess.run([*cli, "--dry-run", "--set", "openrlhf.rollout.batch_size=x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid int value" in bad.stderr
