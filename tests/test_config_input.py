"""Config files as users write them: non-UTF-8 bytes, broken YAML, duplicate keys, empty sections.

Each gives a one-line error naming the file (and the line) through every loader: recipes
(`asearcher train`), run configs (`python -m asearcher_plugin.launch --config`), agent configs
($ASEARCHER_CONFIG, read by the environment) and synthesis configs.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from asearcher_plugin.launch import LaunchError, config_for_launch
from asearcher_plugin.recipe import RecipeError, load_recipe
from asearcher_plugin.settings.config import CONFIG_ENV, RUN_CONFIG_ENV, ConfigError, load_config
from asearcher_plugin.settings.yamlio import YamlInputError, load_yaml, parse_assignment
from data_synth.config import SynthConfigError, load_synth_config

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "local_7b_1node.yaml"


def _recipe_with(tmp_path, agent_text: str) -> Path:
    """The real recipe with its `agent:` section replaced by `agent_text`."""
    import yaml

    recipe = yaml.safe_load(RECIPE.read_text())
    recipe.pop("agent", None)
    recipe.pop("scheduler", None)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe) + agent_text)
    return path


def _loaders(tmp_path, monkeypatch):
    """(name, load(path), error type) for every loader of a user's YAML file."""
    monkeypatch.delenv(RUN_CONFIG_ENV, raising=False)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    return [
        ("recipe", lambda p: load_recipe(p), RecipeError),
        ("run config", lambda p: config_for_launch(str(p)), LaunchError),
        ("agent config", lambda p: load_config(p), ConfigError),
        ("synth config", lambda p: load_synth_config(p), SynthConfigError),
    ]


def test_duplicate_keys_are_an_error_naming_the_key_and_both_lines():
    text = "agent:\n  max_turns: 4\n  agent_type: asearcher\n  max_turns: 8\n"
    with pytest.raises(YamlInputError) as err:
        load_yaml(text, "run.yaml")
    assert str(err.value) == "run.yaml:4: duplicate key 'max_turns' (lines 2 and 4)"
    with pytest.raises(YamlInputError, match="duplicate key 'agent' .lines 1 and 2."):
        load_yaml("agent: {}\nagent: {max_turns: 3}\n")
    # YAML merge keys may still be overridden: that is what they are for
    assert load_yaml("base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  x: 3\n")["derived"] == {"x": 3, "y": 2}


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"agent:\n  max_turns: 4\n  max_turns: 8\n", r":3: duplicate key 'max_turns' \(lines 2 and 3\)"),
        (b"agent:\n  max_turns: 4\n# caf\xe9\n", r":3: not UTF-8 text \(byte 0xe9"),
        (
            b"agent:\n  max_turns: [4\n  agent_type: x\n",
            r":3:13: not valid YAML: while parsing a flow sequence; expected",
        ),
        (b"agent: {max_turns: 4\n", r":2:1: not valid YAML"),
        (b"agent:\n\tmax_turns: 4\n", r":2:1: not valid YAML: .*'\\t' that cannot start any token"),
    ],
)
def test_bad_files_give_one_line_naming_file_and_line(tmp_path, monkeypatch, content, expected):
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    for name, load, error in _loaders(tmp_path, monkeypatch):
        with pytest.raises(error) as err:
            load(path)
        message = str(err.value)
        assert "\n" not in message, name
        assert message.startswith(str(path) + ":"), (name, message)
        assert err.match(expected), (name, message)


@pytest.mark.parametrize("text", ["agent:\nscheduler: {}\n", "agent: null\n", "agent: ~\n"])
def test_an_empty_agent_section_is_refused_not_defaulted(tmp_path, monkeypatch, text):
    path = _recipe_with(tmp_path, text)
    for _name, load, error in _loaders(tmp_path, monkeypatch)[:3]:
        with pytest.raises(error, match=r"`agent:` is empty \(null\); give its fields, write `agent: {}`"):
            load(path)
    # an explicit empty mapping means the defaults
    path.write_text(path.read_text().replace(text, "agent: {}\n"))
    assert load_recipe(path)["agent"] == {} and config_for_launch(str(path)).agent.max_turns == 10


def test_an_empty_scheduler_or_openrlhf_section_is_refused(tmp_path, monkeypatch):
    path = _recipe_with(tmp_path, "agent: {}\nscheduler:\n")
    for _, load, error in _loaders(tmp_path, monkeypatch)[:2]:
        with pytest.raises(error, match=r"`scheduler:` is empty"):
            load(path)
    no_flags = tmp_path / "no_flags.yaml"
    no_flags.write_text("openrlhf:\nagent: {}\n")
    with pytest.raises(RecipeError, match="`openrlhf:` section of flags"):
        load_recipe(no_flags)
    with pytest.raises(RecipeError, match=r"^--set: `agent:` is empty"):
        load_recipe(RECIPE, ["agent=null"])


def test_set_values_are_parsed_strictly():
    with pytest.raises(ConfigError, match=r"--set agent.tools:1: duplicate key 'a'"):
        parse_assignment("agent.tools={a: 1, a: 2}", ConfigError)
    with pytest.raises(YamlInputError, match=r"--set agent.max_turns:1:3: not valid YAML"):
        parse_assignment("agent.max_turns=[4")
    assert parse_assignment("agent.max_turns=4") == ("agent.max_turns", 4)


@pytest.mark.parametrize(
    "override, message",
    [
        ("scheduler.max_concurrent=abc", "scheduler.max_concurrent: Input should be a valid integer"),
        ("scheduler.max_concurrent=0", "scheduler.max_concurrent: Input should be greater than or equal to 1"),
        ("scheduler.max_concurrent=-3", "scheduler.max_concurrent: Input should be greater than or equal to 1"),
        ("scheduler.max_concurent=4", "scheduler.max_concurent: Extra inputs are not permitted"),
        ("agent.max_turn=4", "agent.max_turn: Extra inputs are not permitted"),
        ("schedular.max_concurrent=4", "unknown section(s) ['schedular']"),
    ],
)
def test_train_dry_run_refuses_bad_scheduler_values_and_typos(override, message):
    proc = subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.cli", "train", str(RECIPE), "--dry-run", "--set", override],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in (RUN_CONFIG_ENV, CONFIG_ENV)},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_env_agent_config_that_is_not_utf8_names_the_variable_file(tmp_path, monkeypatch):
    """The agent file reads $ASEARCHER_CONFIG: a bad file there is one clear line, not a traceback."""
    path = tmp_path / "agent.yaml"
    path.write_bytes(b"max_turns: 4\nagent_type: \xff\n")
    monkeypatch.delenv(RUN_CONFIG_ENV, raising=False)
    monkeypatch.setenv(CONFIG_ENV, str(path))
    with pytest.raises(ConfigError, match=rf"^{path}:2: not UTF-8 text \(byte 0xff at offset 25\)"):
        load_config()
