"""Every recipe against the installed OpenRLHF 0.11.2: its own parser, types and argument checks."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from asearcher_plugin.config import AgentConfig
from asearcher_plugin.launch import build_command
from asearcher_plugin.openrlhf_args import RecipeFlagError, check_args, known_flags
from asearcher_plugin.recipe import RecipeError, load_recipe, openrlhf_argv

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
    argv, env = build_command(str(path), [], tmp_path)
    args = check_args(argv)
    assert args.train.agent_func_path.endswith("asearcher_plugin/env.py") and args.reward.remote_url == ["agent"]
    assert args.train.async_enable and args.train.partial_rollout_enable
    assert args.algo.advantage.is_correction_level == "token"  # rollout log-probs recorded for stale samples
    assert Path(env["ASEARCHER_CONFIG"]).is_file()
    assert yaml.safe_load(Path(env["ASEARCHER_CONFIG"]).read_text())["agent"] == recipe["agent"]


def test_wrong_flags_are_refused_with_openrlhf_s_message(tmp_path):
    base = RECIPES[0]
    with pytest.raises(RecipeFlagError, match="invalid int value: 'many'"):
        check_args(build_command(str(base), ["openrlhf.rollout.batch_size=many"], tmp_path)[0])
    with pytest.raises(RecipeFlagError, match="unrecognized arguments: --rollout.batchsize"):
        check_args(build_command(str(base), ["openrlhf.rollout.batchsize=4"], tmp_path)[0])
    with pytest.raises(RecipeFlagError, match="partial_rollout_enable requires --train.async_enable"):
        check_args(build_command(str(base), ["openrlhf.train.async_enable=false"], tmp_path)[0])
    with pytest.raises(RecipeError, match="agent_type"):
        load_recipe(base, ["agent.agent_type=magic"])
    with pytest.raises(RecipeError, match="key=value"):
        load_recipe(base, ["nonsense"])


def test_argv_rendering():
    assert openrlhf_argv({"a.b": True, "c": False, "d": [0.0, 5.0], "e": 3, "f": None}) == ["--a.b", "--d", "0.0", "5.0", "--e", "3"]


def test_train_print_cmd_and_dry_run(tmp_path):
    cli = [sys.executable, "-m", "asearcher_plugin.cli", "train", str(RECIPES[0]), "--run-dir", str(tmp_path)]
    out = subprocess.run([*cli, "--print-cmd", "--set", "agent.max_turns=16"], capture_output=True, text=True, check=True).stdout
    assert "ASEARCHER_CONFIG=" in out and "ray job submit" in out and "--train.agent_func_path" in out
    assert yaml.safe_load((tmp_path / "agent.yaml").read_text())["agent"]["max_turns"] == 16
    ok = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True)
    assert ok.returncode == 0 and "accepted" in ok.stdout
    bad = subprocess.run([*cli, "--dry-run", "--set", "openrlhf.rollout.batch_size=x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid int value" in bad.stderr
