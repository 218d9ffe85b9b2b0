"""Recipes: every packaged one against the installed OpenRLHF 0.11.2 (its own parser, types and argument checks),
lookup by name or path, errors naming the file and the field, and the recipes shipped in the wheel."""

import json
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from asearcher_plugin.launch import build_command
from asearcher_plugin.openrlhf.args import known_flags
from asearcher_plugin.recipe import (
    RECIPE_DIR,
    Recipe,
    RecipeError,
    load_recipe,
    openrlhf_argv,
    recipe_names,
    resolve_recipe,
)
from tests.helpers import ROOT, build_and_install, install_in_fresh_venv

RECIPES = recipe_names()
BASE = "local_7b_1node"


def test_there_are_the_recipes_users_expect():
    assert set(RECIPES) >= {"local_7b_1node", "local_14b_2nodes", "local_7b_16nodes", "web_qwq32b", "cpu_tiny"}
    assert resolve_recipe("cpu_tiny") == resolve_recipe("cpu_tiny.yaml") == RECIPE_DIR / "cpu_tiny.yaml"
    # from the checkout (an editable install), the names are the files at the top of the repository
    assert RECIPE_DIR == ROOT / "recipes" and not (ROOT / "asearcher_plugin" / "recipes").exists()


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_is_accepted_by_openrlhf(name):
    recipe = Recipe.load(name)
    assert recipe.description and recipe.resources and recipe.source == str(RECIPE_DIR / f"{name}.yaml")
    flags = known_flags()
    for flag in recipe.openrlhf:
        assert f"--{flag}" in flags, f"{name}: --{flag} is not an OpenRLHF 0.11.2 flag"
    checked = recipe.check()
    args, config = checked.args, recipe.run_config()
    assert args.train.agent_func_path.endswith("asearcher_plugin/env.py") and args.reward.remote_url == ["agent"]
    assert args.train.async_enable and args.train.partial_rollout_enable
    assert args.algo.advantage.is_correction_level == "token"  # rollout log-probs recorded for stale samples
    assert args.vllm.enable_prefix_caching  # every turn re-sends the trajectory
    assert not (args.data.apply_chat_template and config.agent.wrap_prompt)  # templated once
    if recipe.resources.nodes > 1 and config.agent.tools.backend == "local":
        # rollout engines on other nodes cannot reach a KB on "their" loopback
        assert not any(h in u for u in config.agent.tools.local.urls for h in ("127.0.0.1", "localhost"))
    settings = checked.scheduler
    # streaming headroom: batches admitted beyond what OpenRLHF's queue holds; the warm start's RL keeps the learning
    # benchmark's measured bound (eta 1 = the queue: its published gains were measured so)
    assert settings.max_staleness - args.train.async_queue_size >= (0 if name == "cpu_warm_start" else 1)
    # in flight: what the engines can serve, not the staleness bound ((eta + 1) x B = 640 groups on 16 nodes)
    per_engine = settings.max_concurrent * args.rollout.n_samples_per_prompt / args.vllm.num_engines
    assert settings.max_concurrent == recipe.scheduler.max_concurrent and per_engine <= 128, (name, per_engine)


def test_a_recipe_by_path_and_the_dict_form(tmp_path):
    own = tmp_path / "mine.yaml"
    own.write_text((RECIPE_DIR / "cpu_tiny.yaml").read_text().replace("max_turns: 4", "max_turns: 7"))
    assert Recipe.load(own).agent.max_turns == 7 and Recipe.load(str(own)).source == str(own)
    # the sections as written, defaults not filled in (what `asearcher rollout` reads)
    as_dict = load_recipe("cpu_tiny", ["agent.max_turns=5"])
    assert as_dict["agent"]["max_turns"] == 5 and "wrap_prompt" not in as_dict["agent"]
    assert as_dict["openrlhf"]["rollout.batch_size"] == 2


@pytest.mark.parametrize(
    "given, message",
    [
        ("local_7b", "local_7b: unknown recipe; give a YAML path or one of the packaged recipes: cpu_tiny, "),
        ("nowhere/cpu_tiny.yaml", "recipe file not found (the packaged 'cpu_tiny'?)"),
        ("mine.yaml", "mine.yaml: recipe file not found; give a YAML path or one of the packaged recipes: "),
    ],
)
def test_an_unknown_recipe_lists_the_packaged_names(given, message):
    with pytest.raises(RecipeError) as err:
        Recipe.load(given)
    assert message in str(err.value)
    assert all(name in str(err.value) for name in RECIPES)


@pytest.mark.parametrize(
    "override, field, message",
    [
        ("openrlhf.rollout.batch_size=many", "openrlhf.rollout.batch_size", "invalid int value: 'many'"),
        (
            "openrlhf.rollout.batchsize=4",
            "openrlhf.rollout.batchsize",
            "not a flag of OpenRLHF 0.11.2 (did you mean rollout.batch_size?)",
        ),
        ("openrlhf.train.async_enable=1", "openrlhf.train.async_enable", "a switch: give true or false, not 1"),
        ("openrlhf.algo.advantage.estimator=grpo", "openrlhf.algo.advantage.estimator", "invalid choice: 'grpo'"),
        ("openrlhf.train.async_enable=false", "", "partial_rollout_enable requires --train.async_enable"),
        ("openrlhf.train.partial_rollout_enable=false", "", "partial_rollout_enable"),  # the scheduler's own check
        ("openrlhf.train.async_queue_size=5", "scheduler.max_staleness", "=4 < --train.async_queue_size=5"),
    ],
)
def test_openrlhf_flags_are_checked_by_openrlhf_naming_file_and_field(override, field, message):
    recipe = Recipe.load(BASE, [override])  # shapes are fine: only OpenRLHF's parser and checks can tell
    with pytest.raises(RecipeError) as err:
        recipe.check()
    assert str(err.value).startswith(f"{RECIPE_DIR / BASE}.yaml: {field}"), str(err.value)
    assert message in str(err.value)


def test_streaming_needs_eta_at_least_the_queue():
    with pytest.raises(RecipeError, match=r"max_staleness=2 < --train.async_queue_size=4"):
        Recipe.load(BASE, ["openrlhf.train.async_queue_size=4", "scheduler.max_staleness=2"]).check()
    checked = Recipe.load(BASE, ["scheduler.max_staleness=null", "openrlhf.train.async_queue_size=2"]).check()
    assert checked.scheduler.max_staleness == 4  # default: queue + 2
    # ASearcher's group filter and per-call sequences are the streaming scheduler's: refused without it, by name
    with pytest.raises(RecipeError, match="scheduler.group_filter: scores_differ is the streaming scheduler's"):
        Recipe.load(BASE, ["scheduler.enable=false"]).check()
    plain = ["scheduler.enable=false", "scheduler.group_filter=mean_in_range", "agent.training_sequences=trajectory"]
    assert Recipe.load(BASE, plain).check().scheduler is None


@pytest.mark.parametrize(
    "override, message",
    [
        ("scheduler.max_concurrent=abc", "scheduler.max_concurrent: Input should be a valid integer"),
        ("scheduler.max_concurrent=0", "scheduler.max_concurrent"),
        ("scheduler.max_staleness=-3", "scheduler.max_staleness"),
        ("scheduler.max_stalenes=4", "scheduler.max_stalenes: Extra inputs are not permitted"),
        ("scheduler.on_stale=drop", "scheduler.on_stale"),
        ("schedular.enable=true", "unknown section(s) ['schedular']"),
        ("agent.agent_type=magic", "agent.agent_type"),
        ("resources.node=2", "resources.node: Extra inputs are not permitted"),
        ("openrlhf.rollout={batch_size: 4}", "rollout: a flag's value is a number, a string, true/false or a list"),
        ("openrlhf.--rollout.batch_size=4", "write a flag without its dashes"),
        ("openrlhf=null", "--set: `openrlhf:` is empty"),
    ],
)
def test_sections_are_validated_when_loaded_naming_file_and_field(override, message):
    with pytest.raises(RecipeError) as err:
        Recipe.load(BASE, [override])
    assert message in str(err.value)
    if not message.startswith("--set"):
        assert str(err.value).startswith(f"{RECIPE_DIR / BASE}.yaml: ")


def test_bad_set_syntax_is_named():
    with pytest.raises(RecipeError, match="key=value"):
        Recipe.load(BASE, ["nonsense"])


def test_chat_template_applied_twice_is_refused():
    with pytest.raises(RecipeError, match="web_qwq32b.yaml: openrlhf.data.apply_chat_template"):
        Recipe.load("web_qwq32b", ["openrlhf.data.apply_chat_template=true"])
    assert Recipe.load("web_qwq32b", ["openrlhf.data.apply_chat_template=true", "agent.wrap_prompt=false"])
    # tool-calls renders the whole conversation itself: never a prompt OpenRLHF templated
    with pytest.raises(RecipeError, match="local_qwen3_8b_tools.yaml: openrlhf.data.apply_chat_template"):
        Recipe.load("local_qwen3_8b_tools", ["openrlhf.data.apply_chat_template=true", "agent.wrap_prompt=false"])


def test_argv_rendering():
    flags = {"a.b": True, "c": False, "d": [0.0, 5.0], "e": 3, "f": None, "max_norm": 0}
    # a zero is a value (max_norm 0 turns clipping off), not a flag left out
    assert openrlhf_argv(flags) == ["--a.b", "--d", "0.0", "5.0", "--e", "3", "--max_norm", "0"]
    argv, config = build_command(BASE, ["agent.max_turns=16"])
    assert argv == Recipe.load(BASE, ["agent.max_turns=16"]).argv() and config.agent.max_turns == 16


def test_train_print_cmd_and_dry_run_by_name():
    cli = [sys.executable, "-m", "asearcher_plugin.cli", "train", BASE]
    out = subprocess.run(
        [*cli, "--print-cmd", "--set", "agent.max_turns=16"], capture_output=True, text=True, check=True
    ).stdout
    launcher, job = out.strip().splitlines()
    assert "python -m asearcher_plugin.launch" in launcher and "--train.agent_func_path" in launcher
    # the cluster form runs the launcher (which installs the scheduler), with the config in the job's runtime env
    assert job.startswith("ray job submit") and "-- python -m asearcher_plugin.launch" in job
    runtime = json.loads(shlex.split(job)[shlex.split(job).index("--runtime-env-json") + 1])
    run_config = json.loads(runtime["env_vars"]["ASEARCHER_RUN_CONFIG"])
    assert run_config["agent"]["max_turns"] == 16 and run_config["scheduler"]["max_staleness"] == 4
    # nothing of this machine's layout: the entrypoint finds its own agent file on the cluster
    assert "--train.agent_func_path" not in job and "site-packages" not in job
    ok = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True)
    assert ok.returncode == 0 and "accepted" in ok.stdout and "streaming scheduler: max_staleness 4" in ok.stdout
    # ASearcher's 24 concurrent question groups of 16 on 4 engines
    assert "24 groups = 384 trajectories in flight, 96 per engine on 4 engines" in ok.stdout
    bad = subprocess.run([*cli, "--dry-run", "--set", "openrlhf.rollout.batch_size=x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert f"{BASE}.yaml: openrlhf.rollout.batch_size: invalid int value: 'x'" in bad.stderr
    unknown = subprocess.run([*cli[:-1], "local_7b", "--dry-run"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown recipe" in unknown.stderr and "local_7b_1node" in unknown.stderr


def test_the_job_command_makes_local_relative_paths_absolute(tmp_path, monkeypatch):
    from asearcher_plugin.launch import ray_job_command

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "q.jsonl").write_text("{}\n")
    argv, config = build_command(BASE, ["openrlhf.data.prompt_dataset=data/q.jsonl"])
    job = shlex.split(ray_job_command(argv, config))
    assert job[job.index("--data.prompt_dataset") + 1] == str(tmp_path / "data" / "q.jsonl")
    # a hub dataset name (no such local path) is left alone
    argv, config = build_command(BASE, ["openrlhf.data.prompt_dataset=OpenRLHF/prompts"])
    job = shlex.split(ray_job_command(argv, config))
    assert job[job.index("--data.prompt_dataset") + 1] == "OpenRLHF/prompts"
    # folders the run writes, which do not exist yet, are absolute too; the job runs in a copy of this directory
    argv, config = build_command(BASE, ["openrlhf.ckpt.path=runs/x/ckpt", "openrlhf.ckpt.output_dir=runs/x/final"])
    job = shlex.split(ray_job_command(argv, config))
    assert job[job.index("--ckpt.path") + 1] == str(tmp_path / "runs" / "x" / "ckpt")
    assert job[job.index("--ckpt.output_dir") + 1] == str(tmp_path / "runs" / "x" / "final")
    runtime = json.loads(job[job.index("--runtime-env-json") + 1])
    assert runtime["working_dir"] == str(tmp_path) and "runs/" in runtime["excludes"]


def test_the_wheel_ships_the_recipes_and_train_finds_them_by_name(tmp_path):
    """From a pip install in a fresh virtual environment, outside the checkout: `asearcher train local_7b_1node
    --dry-run` resolves and validates."""
    wheel, _ = build_and_install(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"asearcher_plugin/recipes/{name}.yaml" for name in RECIPES} <= names
    python = install_in_fresh_venv(tmp_path, wheel)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASEARCHER_") and k != "PYTHONPATH"}
    probe = (
        "import asearcher_plugin.recipe as r; print(r.__file__); print(r.resolve_recipe('local_7b_1node')); "
        "print(r.recipe_names())"
    )
    out = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, check=True, cwd=elsewhere, env=env
    ).stdout.splitlines()
    installed = Path(out[0]).parent  # site-packages/asearcher_plugin of the new environment
    assert installed.is_relative_to(tmp_path / "venv") and installed.name == "asearcher_plugin"
    assert out[1] == str(installed / "recipes/local_7b_1node.yaml")
    assert eval(out[2]) == RECIPES
    target = installed.parent
    dry = subprocess.run(
        [python, "-m", "asearcher_plugin.cli", "train", "local_7b_1node", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
    )
    assert dry.returncode == 0, dry.stderr
    assert f"{target}/asearcher_plugin/recipes/local_7b_1node.yaml: " in dry.stdout and "accepted" in dry.stdout
    assert (
        f"{target}/asearcher_plugin/env.py"
        in subprocess.run(
            [python, "-m", "asearcher_plugin.cli", "train", "local_7b_1node", "--print-cmd"],
            capture_output=True,
            text=True,
            check=True,
            cwd=elsewhere,
            env=env,
        ).stdout
    )  # the installed agent file is the one OpenRLHF loads
