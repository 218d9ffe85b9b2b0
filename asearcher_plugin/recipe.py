"""Recipes: one YAML file holding the agent config and the OpenRLHF flags of a training run."""

from __future__ import annotations

from pathlib import Path

import yaml

from .config import AgentConfig, ConfigError, parse_assignment, set_dotted


class RecipeError(ValueError):
    pass


def load_recipe(path: str | Path, overrides: list[str] = ()) -> dict:
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe not found: {path}")
    recipe = yaml.safe_load(path.read_text()) or {}
    if not isinstance(recipe, dict) or "openrlhf" not in recipe:
        raise RecipeError(f"{path}: a recipe needs an `openrlhf:` section of flags")
    for item in overrides:
        apply_override(recipe, item)
    try:
        AgentConfig.model_validate(recipe.get("agent") or {})
    except Exception as exc:  # noqa: BLE001 - pydantic's message names the field
        raise RecipeError(f"{path}: agent section: {exc}") from None
    return recipe


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


def write_agent_config(recipe: dict, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump({"agent": recipe.get("agent") or {}}, sort_keys=False))
    return out


__all__ = ["ConfigError", "RecipeError", "apply_override", "load_recipe", "openrlhf_argv", "write_agent_config"]
