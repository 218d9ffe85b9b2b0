"""Recipes: one YAML file holding the agent config and the OpenRLHF flags of a training run."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from .config import (ConfigError, RunConfig, null_sections, parse_assignment, read_yaml_mapping, set_dotted,
                     validation_problems)


class RecipeError(ValueError):
    pass


def load_recipe(path: str | Path, overrides: list[str] = ()) -> dict:
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe not found: {path}")
    recipe = read_yaml_mapping(path, RecipeError)
    if not isinstance(recipe.get("openrlhf"), dict):
        raise RecipeError(f"{path}: a recipe needs an `openrlhf:` section of flags")
    if problems := null_sections(recipe, path):
        raise RecipeError("; ".join(problems))
    for item in overrides:
        apply_override(recipe, item)
    unknown = set(recipe) - {"description", "resources", "agent", "scheduler", "openrlhf"}
    if unknown:
        raise RecipeError(f"{path}: unknown section(s) {sorted(unknown)}")
    if problems := null_sections(recipe, "--set"):
        raise RecipeError("; ".join(problems))
    try:
        config = run_config(recipe)
    except ValidationError as exc:
        raise RecipeError(f"{path}: {validation_problems(exc)}") from None
    if recipe["openrlhf"].get("data.apply_chat_template") and config.agent.wrap_prompt:
        raise RecipeError(f"{path}: openrlhf data.apply_chat_template and agent.wrap_prompt would both template the "
                          "prompt; the agent applies the chat template itself (feedback_style: chat), so drop "
                          "data.apply_chat_template, or set agent.wrap_prompt: false for a dataset of ready prompts")
    return recipe


def run_config(recipe: dict) -> RunConfig:
    """The recipe's `agent:` and `scheduler:` sections, validated (an unknown or invalid field names itself)."""
    return RunConfig.model_validate({"agent": recipe.get("agent") or {}, "scheduler": recipe.get("scheduler") or {}})


def apply_override(recipe: dict, item: str) -> None:
    """`--set openrlhf.rollout.batch_size=64` or `--set agent.max_turns=16`; values are YAML."""
    key, value = parse_assignment(item, RecipeError)
    section, _, rest = key.partition(".")
    if section == "openrlhf":
        recipe.setdefault("openrlhf", {})[rest] = value  # OpenRLHF flags are dotted names, kept whole
        return
    set_dotted(recipe, key, value, RecipeError)


def openrlhf_argv(flags: dict) -> list[str]:
    """`{"train.async_enable": True, "rollout.batch_size": 128}` -> `["--train.async_enable", "--rollout.batch_size", "128"]`."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        argv.append(f"--{name}")
        if value is True:
            continue
        if isinstance(value, (list, tuple)):
            argv += [str(v) for v in value]
        else:
            argv.append(str(value))
    return argv


__all__ = ["ConfigError", "RecipeError", "apply_override", "load_recipe", "openrlhf_argv", "run_config"]
