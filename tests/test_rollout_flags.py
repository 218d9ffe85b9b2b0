"""`asearcher rollout` reads a recipe's OpenRLHF flags once, typed: what it runs with, the defaults of a flag left
out, and a bad flag named."""

from pathlib import Path

import pytest

from asearcher_plugin.commands.rollout import RolloutFlags
from asearcher_plugin.recipe import Recipe


def test_the_flags_of_a_recipe_with_its_overrides():
    recipe = Recipe.load("cpu_tiny", ["openrlhf.rollout.batch_size=3", "openrlhf.rollout.temperature=0.5"])
    flags = RolloutFlags.of(recipe.openrlhf, recipe.source)
    assert flags.model == Path("runs/tiny-model") and flags.prompt_dataset == Path("runs/sample_prompts.jsonl")
    assert (flags.input_key, flags.label_key) == ("question", "golden_answers")
    assert (flags.batch_size, flags.n_samples, flags.max_len, flags.temperature) == (3, 2, 1024, 0.5)


def test_a_flag_left_out_takes_the_small_cpu_runs_default():
    flags = RolloutFlags.of(
        {"actor.model_name_or_path": "m", "data.prompt_dataset": "p.jsonl", "data.label_key": None}
    )
    assert (flags.input_key, flags.label_key) == ("input", "label")  # OpenRLHF's label_key flag defaults to None
    assert (flags.batch_size, flags.n_samples, flags.max_len, flags.temperature) == (4, 1, 2048, 1.0)


def test_a_bad_or_missing_flag_is_named():
    with pytest.raises(ValueError) as err:
        RolloutFlags.of({"actor.model_name_or_path": "m", "rollout.batch_size": "many"}, "r.yaml")
    message = str(err.value)
    assert message.startswith("r.yaml: ") and "openrlhf.data.prompt_dataset: Field required" in message
    assert "openrlhf.rollout.batch_size: Input should be a valid integer" in message
    with pytest.raises(ValueError, match="openrlhf.rollout.n_samples_per_prompt: Input should be greater than"):
        RolloutFlags.of(
            {"actor.model_name_or_path": "m", "data.prompt_dataset": "p", "rollout.n_samples_per_prompt": 0}
        )
