"""Recipes: one YAML file holding the agent config, the scheduler config and the OpenRLHF flags of a training run.

A recipe is given by name (a file in the repository's `recipes/`, shipped in the wheel, so it works from a pip
install) or by path. `Recipe.load` validates every section (an unknown or invalid field is an error naming the file
and the field); `Recipe.check` adds what needs OpenRLHF: its own parser and argument checks, and the scheduler
settings resolved against them. `asearcher train RECIPE --dry-run` is `load` then `check`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from .settings.config import (
    AgentConfig,
    ConfigError,
    CpuHarnessConfig,
    RunConfig,
    SchedulerConfig,
    validation_problems,
)
from .settings.yamlio import null_sections, parse_assignment, read_yaml_mapping, set_dotted

# The recipes live at the top of the repository (recipes/), where a user looks first; a wheel ships them inside the
# package (setup.py maps them to asearcher_plugin/recipes/), so a name resolves from a checkout and from a pip install.
_PACKAGED = Path(__file__).with_name("recipes")
RECIPE_DIR = _PACKAGED if _PACKAGED.is_dir() else Path(__file__).resolve().parents[1] / "recipes"
SECTIONS = ("description", "resources", "agent", "scheduler", "cpu_harness", "openrlhf", "sft")
RUN_SECTIONS = ("agent", "scheduler", "cpu_harness")  # what travels with the run besides OpenRLHF's flags
SCALARS = (bool, int, float, str)


class RecipeError(ValueError):
    pass


class Resources(BaseModel):
    """What a run needs: `--dry-run` and `train` check the flags' GPUs and memory estimates against it
    (`openrlhf/fit.py`); Ray places the work on whatever cluster it runs on."""

    model_config = ConfigDict(extra="forbid")
    nodes: int | None = Field(None, ge=1)
    gpus_per_node: int | None = Field(None, ge=0)
    gpu_memory_gb: float | None = Field(None, ge=0)
    host_ram_gb: float | None = Field(None, ge=0)
    hours: float | None = Field(None, ge=0)


class CheckedRecipe(BaseModel):
    """A recipe accepted by OpenRLHF's parser and checks: the argv, OpenRLHF's args, the resolved scheduler."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    argv: list[str]
    args: object
    scheduler: SchedulerConfig | None  # None: OpenRLHF's own generator runs (no async, or scheduler.enable false)
    agent: AgentConfig | None = None
    resources: Resources | None = None

    def fit(self):
        """The GPUs the flags ask for and the memory estimates against `resources` (`openrlhf/fit.py`)."""
        from .openrlhf.fit import check_fit

        n = self.args.rollout.n_samples_per_prompt
        return check_fit(
            self.args,
            self.resources,
            per_call=self.agent is not None and self.agent.training_sequences == "per_call",
            in_flight=self.scheduler.max_concurrent * n if self.scheduler else None,
        )

    def summary(self) -> str:
        return "\n".join(line for line in (self._streaming(), self._budgets(), self.fit().summary()) if line)

    def _budgets(self) -> str:
        if self.agent is None:
            return ""
        a, max_len = self.agent, self.args.data.max_len
        turn = f"up to {a.max_new_tokens_per_turn} generated"
        if a.training_sequences == "per_call":
            return (
                f"token budgets (per_call sequences): each call {max_len} tokens (its context and {turn}); each "
                f"trajectory {a.max_turns} calls, {a.max_turns * a.max_new_tokens_per_turn} generated tokens at most, "
                f"trained as one or more sequences of at most {max_len} tokens each"
            )
        return (
            f"token budgets (one sequence per trajectory): the whole trajectory {max_len} tokens (prompt, "
            f"{a.max_turns} calls of {turn}, tool output); a longer one ends truncated"
        )

    def _streaming(self) -> str:
        if self.scheduler is None:
            return "streaming scheduler: off (OpenRLHF's own generator)"
        s, n, engines = self.scheduler, self.args.rollout.n_samples_per_prompt, self.args.vllm.num_engines
        trajectories = s.max_concurrent * n
        return (
            f"streaming scheduler: max_staleness {s.max_staleness}, max_concurrent {s.max_concurrent} groups "
            f"= {trajectories} trajectories in flight, {trajectories / max(engines, 1):.0f} per engine on "
            f"{engines} engines, on_stale {s.on_stale}"
        )


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str | None = None
    resources: Resources | None = None
    agent: AgentConfig = Field(default_factory=AgentConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    cpu_harness: CpuHarnessConfig = Field(default_factory=CpuHarnessConfig)
    openrlhf: dict[str, Any] = Field(
        description="OpenRLHF 0.11.2 flags without the leading dashes, e.g. rollout.batch_size: 128; true is a switch "
        "given, false or null leaves the flag out, a list gives several values"
    )
    sft: dict[str, Any] | None = Field(
        None,
        description="`asearcher sft`: OpenRLHF 0.11.2 train_sft flags without the leading dashes, for a warm start "
        "on an `asearcher sft-data` dataset before the RL of the `openrlhf:` section",
    )
    _source: str = PrivateAttr("recipe")

    @field_validator("openrlhf", "sft")
    @classmethod
    def _flag_values(cls, flags: dict | None) -> dict | None:
        """Shapes only; names, types and choices are OpenRLHF's parser's to judge (`check`)."""
        for name, value in (flags or {}).items():
            if name.startswith("-") or not name:
                raise ValueError(f"{name!r}: write a flag without its dashes, e.g. rollout.batch_size")
            values = value if isinstance(value, list) else [value]
            if value is not None and not all(isinstance(v, SCALARS) for v in values):
                raise ValueError(
                    f"{name}: a flag's value is a number, a string, true/false or a list of them, not "
                    f"{type(value).__name__} {value!r} (flags are dotted names: rollout.batch_size: 4)"
                )
        return flags

    @property
    def source(self) -> str:
        """The file the recipe came from, for messages."""
        return self._source

    @classmethod
    def load(cls, recipe: str | Path, overrides: list[str] = ()) -> Recipe:
        """A packaged recipe's name or a YAML path, with `--set` overrides applied; validated."""
        path = resolve_recipe(recipe)
        data = read_yaml_mapping(path, RecipeError)
        if not isinstance(data.get("openrlhf"), dict):
            raise RecipeError(f"{path}: a recipe needs an `openrlhf:` section of flags")
        if problems := null_sections(data, path):
            raise RecipeError("; ".join(problems))
        for item in overrides:
            apply_override(data, item)
        if unknown := set(data) - set(SECTIONS):
            raise RecipeError(f"{path}: unknown section(s) {sorted(unknown)}; expected {', '.join(SECTIONS)}")
        if problems := null_sections(data, "--set", ("agent", "scheduler", "openrlhf")):
            raise RecipeError("; ".join(problems))
        try:
            model = cls.model_validate(data)
        except ValidationError as exc:
            raise RecipeError(f"{path}: {validation_problems(exc)}") from None
        model._source = str(path)
        model._templated_once()
        return model

    def _templated_once(self) -> None:
        if self.openrlhf.get("data.apply_chat_template") and self.agent.agent_type == "tool-calls":
            raise RecipeError(
                f"{self.source}: openrlhf.data.apply_chat_template: agent_type tool-calls renders the whole "
                "conversation with the chat template itself (the question is its user message); drop the flag"
            )
        if self.openrlhf.get("data.apply_chat_template") and self.agent.wrap_prompt:
            raise RecipeError(
                f"{self.source}: openrlhf.data.apply_chat_template and agent.wrap_prompt would both "
                "template the prompt; the agent applies the chat template itself (feedback_style: "
                "chat), so drop data.apply_chat_template, or set agent.wrap_prompt: false for a dataset "
                "of ready prompts"
            )

    def run_config(self) -> RunConfig:
        """What travels with the run besides the flags (the agent and scheduler sections)."""
        return RunConfig(agent=self.agent, scheduler=self.scheduler, cpu_harness=self.cpu_harness)

    def argv(self) -> list[str]:
        """The OpenRLHF command line, with the plugin's agent file unless the recipe names one of its own."""
        own = "train.agent_func_path" in self.openrlhf
        return openrlhf_argv(self.openrlhf) + (
            [] if own else ["--train.agent_func_path", agent_path("asearcher_plugin.env")]
        )

    def check(self) -> CheckedRecipe:
        """The flags through OpenRLHF 0.11.2's own parser and asserts, then the scheduler settings against them."""
        from .openrlhf.args import RecipeFlagError, flag_problems

        try:
            if problems := flag_problems(self.openrlhf):
                raise RecipeError("; ".join(f"{self.source}: openrlhf.{p.flag}: {p.message}" for p in problems))
            argv = self.argv()
            args, scheduler = check_run(argv, self.scheduler, self.agent.training_sequences)
        except RecipeFlagError as exc:
            field = f"openrlhf.{exc.flag}: " if exc.flag else ""
            raise RecipeError(f"{self.source}: {field}{exc.message}") from None
        except ValueError as exc:  # the scheduler settings, which name their own fields
            if isinstance(exc, RecipeError):
                raise
            raise RecipeError(f"{self.source}: {exc}") from None
        return CheckedRecipe(argv=argv, args=args, scheduler=scheduler, agent=self.agent, resources=self.resources)


def check_run(argv: list[str], scheduler: SchedulerConfig, training_sequences: str = "trajectory"):
    """OpenRLHF's parsed args and the resolved scheduler settings (None when OpenRLHF's generator runs).

    Raises RecipeFlagError (OpenRLHF refuses the flags) or StreamingSettingsError; the launcher runs the same
    checks on flags given without a recipe.
    """
    from .openrlhf.args import check_args
    from .openrlhf.settings import StreamingSettingsError, check_per_call, resolve_settings

    args = check_args(argv)
    settings = resolve_settings(scheduler, args) if scheduler.enable and args.train.async_enable else None
    if settings is None and scheduler.group_filter != "mean_in_range":
        raise StreamingSettingsError(
            f"scheduler.group_filter: {scheduler.group_filter} is the streaming scheduler's; OpenRLHF's own "
            "generator (no --train.async_enable, or scheduler.enable: false) keeps groups by mean (mean_in_range)"
        )
    if training_sequences == "per_call":
        check_per_call(args, settings)
    return args, settings


def agent_path(spec: str) -> str:
    """`asearcher_plugin.env` (a module) or a path to a .py file -> the file OpenRLHF should load."""
    if spec.endswith(".py"):
        return str(Path(spec).resolve())
    import importlib.util

    found = importlib.util.find_spec(spec)
    if found is None or not found.origin:
        raise RecipeError(f"--agent {spec}: no such module")
    return found.origin


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def resolve_recipe(recipe: str | Path) -> Path:
    """An existing file as given, else the packaged recipe of that name (`local_7b_1node` or `local_7b_1node.yaml`)."""
    path = Path(recipe).expanduser()
    if path.is_file():
        return path
    names = recipe_names()
    if path.parent == Path(".") and path.stem in names and path.suffix in ("", ".yaml"):
        return RECIPE_DIR / f"{path.stem}.yaml"
    what = "recipe file not found" if path.suffix in (".yaml", ".yml") or len(path.parts) > 1 else "unknown recipe"
    hint = f" (the packaged {path.stem!r}?)" if path.stem in names else ""
    raise RecipeError(f"{recipe}: {what}{hint}; give a YAML path or one of the packaged recipes: {', '.join(names)}")


def load_recipe(recipe: str | Path, overrides: list[str] = ()) -> dict:
    """The recipe's sections as written (defaults not filled in), after validation."""
    return Recipe.load(recipe, overrides).model_dump(exclude_unset=True)


def read_run_file(path: str | Path) -> RunConfig:
    """A run config (`agent:`, `scheduler:`, `cpu_harness:`) or a whole recipe, for `python -m
    asearcher_plugin.launch --config`; the OpenRLHF flags of a recipe are not read there (the launcher's command
    line)."""
    data = read_yaml_mapping(path, RecipeError)
    if unknown := set(data) - set(SECTIONS):
        raise RecipeError(f"{path}: unknown section(s) {sorted(unknown)}; expected {', '.join(RUN_SECTIONS)}")
    if problems := null_sections(data, path):
        raise RecipeError("; ".join(problems))
    try:
        return RunConfig.model_validate({k: data[k] for k in RUN_SECTIONS if k in data})
    except ValidationError as exc:
        raise RecipeError(f"{path}: {validation_problems(exc)}") from None


def apply_override(recipe: dict, item: str) -> None:
    """`--set openrlhf.rollout.batch_size=64` or `--set agent.max_turns=16`; values are YAML."""
    key, value = parse_assignment(item, RecipeError)
    section, _, rest = key.partition(".")
    if section in ("openrlhf", "sft") and rest:
        if section == "sft" and recipe.get("sft") is None:
            recipe["sft"] = {}
        if not isinstance(recipe.get(section), dict):
            raise RecipeError(f"--set {key}: {section} is not a section")
        recipe[section][rest] = value  # OpenRLHF flags are dotted names, kept whole
        return
    set_dotted(recipe, key, value, RecipeError)


def openrlhf_argv(flags: dict) -> list[str]:
    """`{"train.async_enable": True, "rollout.batch_size": 128}` ->
    `["--train.async_enable", "--rollout.batch_size", "128"]`; false and null leave a flag out."""
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


__all__ = [
    "CheckedRecipe",
    "ConfigError",
    "Recipe",
    "RecipeError",
    "agent_path",
    "apply_override",
    "check_run",
    "load_recipe",
    "openrlhf_argv",
    "read_run_file",
    "recipe_names",
    "resolve_recipe",
]
