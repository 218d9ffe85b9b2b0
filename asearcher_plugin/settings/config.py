"""Agent configuration: a YAML file named by `ASEARCHER_CONFIG`, validated when the agent loads.

The schemas of the agent and run configs, and their loading (files and `--set` are read by `yamlio`).

Every field has a default, so an empty file (or no file) gives a Search-R1-style agent on a
local knowledge base at http://127.0.0.1:5005. A wrong field fails at load time, naming it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from local_retriever.endpoints import EndpointConfig

# the tools' schemas lived here: their names stay importable from here (and from the old asearcher_plugin.config)
from ..tools.config import LocalToolsConfig, McpServerConfig, ToolsConfig, WebToolsConfig  # noqa: F401
from ..utils.schema import ConfigError, Strict, validation_problems
from .yamlio import null_sections, parse_assignment, read_yaml_mapping, set_dotted

CONFIG_ENV = "ASEARCHER_CONFIG"  # a YAML file's path
# The validated run config as JSON ({"agent": ..., "scheduler": ...}): the launcher puts it into Ray's
# runtime env, so every rollout actor on every node reads the same config, with no file to copy.
RUN_CONFIG_ENV = "ASEARCHER_RUN_CONFIG"
AgentType = Literal["search-r1", "asearcher", "asearcher-reasoning", "tool-calls"]


class JudgeConfig(EndpointConfig):
    """The judge's endpoint (the shared shape: base_urls, or the older single base_url) and its verdict format."""

    model: str = "judge"
    timeout: float = Field(60.0, gt=0, description="seconds per connect or read")
    retries: int = Field(
        2,
        ge=0,
        description="retries on endpoint errors and replies without a verdict, in one "
        "budget, each on another URL when there is one",
    )
    cache_dir: str | None = Field(None, description="verdicts cached on disk by model, prompt and sampling")
    verdict_format: Literal["verdict", "asearcher"] = Field(
        "verdict",
        description='verdict: reply {"verdict", "reason"}; asearcher: ASearcher\'s DefaultJudge, reply '
        '{"rationale", "judgement": "Correct"|"Incorrect"}, with its prompt, sampling and prediction cut',
    )
    prompt_template: str | None = Field(
        None,
        description="str.format template file with {question}, {golds} or {gt_answer}, {prediction} or "
        "{pred_answer}; default: the format's template in asearcher_plugin/rewards/judge_templates/",
    )
    # Unset: the verdict format's default (verdict / asearcher).
    temperature: float | None = Field(None, ge=0, description="default 0.0 / 0.6")
    top_p: float | None = Field(None, gt=0, le=1, description="not sent when unset")
    max_tokens: int | None = Field(None, ge=1, description="default 256 / 1024")
    prediction_max_chars: int | None = Field(
        None, ge=0, description="prediction cut to this many characters; 0: whole; default 0 / 500"
    )
    prediction_cut_at: str | None = Field(
        None, description="prediction cut before the first occurrence of this string; empty: no cut; default '' / '</'"
    )

    @field_validator("prompt_template")
    @classmethod
    def _template_fields(cls, path: str | None) -> str | None:
        if path:
            from ..rewards.judge import load_template

            load_template(path)
        return path


ASEARCHER_INVALID_WORDS = ["question", "invalid", "appropriate", "valid"]


class RewardConfig(Strict):
    metric: Literal["f1", "em", "asearcher_f1", "cover_em", "substring", "judge"] = "f1"
    format_factor: bool = Field(True, description="multiply the score by 1 if every action was valid, else 0")
    cjk_char_f1: bool = Field(
        False,
        description="F1 over single characters plus digit runs when a gold answer holds "
        "a Chinese character (ASearcher's training F1); off: over whitespace-separated words",
    )
    bool_mapping: bool = Field(
        False,
        description='an answer or gold answer of exactly "True" / "False" scored as "yes" / "no" '
        "(ASearcher's training reward)",
    )
    aug_answer_weight: float = Field(
        0.0,
        ge=0,
        le=1,
        description="for a label with aug_answer: (1 - w) x "
        "score(answer) + w x max(score(aug_answer), score(answer)); ASearcher: 0.3",
    )
    invalid_answer_penalty: float | None = Field(
        None,
        description="the reward of an answer holding one of invalid_answer_words (case-sensitive); ASearcher: -0.5",
    )
    invalid_answer_words: list[str] = Field(default_factory=lambda: list(ASEARCHER_INVALID_WORDS))
    valid_inst_ratio: float = Field(
        1.0,
        ge=0,
        le=1,
        description="share of questions told to find the most likely answer, the only ones whose invalid answers "
        "get invalid_answer_penalty; the others keep the template's sentence allowing '<answer> the question is "
        "invalid. </answer>' (ASearcher's configs: 0.3, with its template asearcher-search-only). Drawn per "
        "question by a hash of its text, the same for its whole group. Below 1 the prompt template must hold "
        "ASearcher's invalid-question sentence",
    )
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    function: str | None = Field(
        None,
        description="'module:callable' of your own, called as fn(question, answer, label, counters) once per "
        "trajectory; its return value is the reward (metric, format_factor and the options above then only "
        "fill the logged scores)",
    )

    @field_validator("function")
    @classmethod
    def _function_resolves(cls, spec: str | None) -> str | None:
        if spec is not None:
            from ..rewards.reward_function import resolve

            resolve(spec)  # RewardFunctionError is a ValueError: reported with the field
        return spec


class AgentConfig(Strict):
    agent_type: AgentType = "search-r1"
    max_turns: int = Field(10, ge=1, le=1024)
    max_new_tokens_per_turn: int = Field(512, ge=1, description="cap on one turn; the total budget is --data.max_len")
    wrap_prompt: bool = Field(True, description="wrap the dataset question in the agent's prompt template")
    feedback_style: Literal["information", "chat"] = Field(
        "information",
        description="tool output inline as <information> (base models) or as a user turn in the chat template",
    )
    prompt_template: str | None = Field(
        None,
        description="a prompt template file of your own (fields: {question}, {current_date}, and {history} for "
        "asearcher-reasoning), or a packaged one by name (asearcher-search-only: ASearcher's training prompt); "
        "default: the packaged template of agent_type",
    )
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    tool_call_format: Literal["hermes", "llama3-json"] = Field(
        "hermes",
        description="agent_type tool-calls: how the model writes tool calls; hermes: <tool_call>{json}</tool_call> "
        '(Qwen2.5/Qwen3, Hermes); llama3-json: a bare {"name": ..., "parameters": ...} object (Llama 3.x)',
    )
    reward: RewardConfig = Field(default_factory=RewardConfig)
    training_sequences: Literal["trajectory", "per_call"] = Field(
        "trajectory",
        description="what OpenRLHF trains on: one growing token sequence per trajectory (capped by --data.max_len), "
        "or ASearcher's per-call sequences (a call that extends the previous context is merged into it, a "
        "changed context starts a new sequence; --data.max_len then caps each call, and the reasoning agent and "
        "ASearcher's page stubs train); per_call needs the streaming scheduler",
    )

    @field_validator("prompt_template")
    @classmethod
    def _template_fits_agent_type(cls, path: str | None, info: ValidationInfo) -> str | None:
        """Read and checked at load: an unknown field would otherwise fail in the middle of a rollout."""
        if path is None or "agent_type" not in info.data:
            return path
        from asearcher_plugin.utils.template_check import packaged_prompt, read_template

        if not packaged_prompt(path):  # a packaged one keeps its name: each node reads its own install's copy
            path = str(Path(path).expanduser().resolve())  # the same file whatever directory a worker runs in
        read_template(path, info.data["agent_type"])  # TemplateError is a ValueError: reported with the field
        return path

    @field_validator("tools")
    @classmethod
    def _asearcher_blocks_are_inline(cls, tools: ToolsConfig, info: ValidationInfo) -> ToolsConfig:
        if tools.observation_format == "asearcher" and info.data.get("feedback_style") == "chat":
            raise ValueError(
                "observation_format 'asearcher' writes tool output inline in the transcript, as ASearcher "
                "does; it needs feedback_style 'information', not 'chat'"
            )
        return tools

    @model_validator(mode="after")
    def _tool_options_need_tool_calls(self) -> AgentConfig:
        if self.agent_type != "tool-calls":
            used = [k for k in ("extra", "mcp") if getattr(self.tools, k)]
            if used:
                raise ValueError(
                    f"tools.{used[0]} offers tools through the chat template's function calling: it needs "
                    f"agent_type 'tool-calls', not {self.agent_type!r}"
                )
        elif self.tools.observation_format == "asearcher":
            raise ValueError(
                "agent_type 'tool-calls' returns tool results as tool messages: observation_format "
                "'asearcher' (ASearcher's inline blocks) does not apply to it"
            )
        if self.reward.valid_inst_ratio < 1 and self.agent_type == "asearcher-reasoning":
            raise ValueError(
                "reward.valid_inst_ratio < 1 rewrites the first prompt; asearcher-reasoning rebuilds its prompt "
                "every call, so it takes 1 (every question told to find the most likely answer)"
            )
        if self.reward.valid_inst_ratio < 1 and self.wrap_prompt:
            from asearcher_plugin.utils.template_check import INVALID_SENTENCE, default_template_path, read_template

            template = self.prompt_template or default_template_path(self.agent_type)
            if INVALID_SENTENCE not in read_template(template, self.agent_type):
                raise ValueError(
                    f"reward.valid_inst_ratio {self.reward.valid_inst_ratio} < 1 replaces ASearcher's invalid-question"
                    f" sentence in the prompt, and the template {Path(template).name} has none: use prompt_template "
                    "asearcher-search-only (ASearcher's), or a template holding that sentence"
                )
        return self


class SchedulerConfig(Strict):
    """The streaming scheduler inside OpenRLHF's async trainer (a recipe's `scheduler:` section)."""

    enable: bool = Field(
        True,
        description="stream with the plugin's scheduler (needs --train.async_enable and "
        "--train.partial_rollout_enable); false keeps OpenRLHF's generator",
    )
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="eta: groups admitted <= (eta + v + 1) x rollout.batch_size at engine version v, so a "
        "group consumed in its turn trains at most eta versions after admission. OpenRLHF's async queue alone "
        "costs async_queue_size versions, so eta >= async_queue_size; eta - async_queue_size batches stream "
        "ahead. Default: async_queue_size + 2",
    )
    max_concurrent: int | None = Field(
        None,
        ge=1,
        description="cap on prompt groups in flight (each runs n_samples_per_prompt trajectories); default "
        "rollout.batch_size, as AReaL's max_concurrent_rollouts. Size it to what the engines and the KB serve: "
        "`asearcher train RECIPE --dry-run` prints the trajectories in flight per engine",
    )
    on_stale: Literal["keep", "restart", "mask"] = Field(
        "keep",
        description="keep: never stop a running group (AReaL); restart: a group that can no longer be "
        "consumed within eta is started afresh once, then dropped; mask: admit as keep, and take every model "
        "turn generated more than eta versions before the update that trains it out of the loss (its "
        "trajectory's reward still counts in the group's baseline)",
    )
    group_filter: Literal["mean_in_range", "scores_differ"] = Field(
        "mean_in_range",
        description="with --algo.dynamic_filtering_enable, the groups trained: mean_in_range keeps a group whose "
        "mean score lies strictly inside --algo.dynamic_filtering_range (OpenRLHF's rule); scores_differ keeps a "
        "group unless all its scores are equal, whatever their value (ASearcher's: such a group has no advantage)",
    )
    trace: str | None = Field(
        None,
        description="JSONL file (on the generator's node): one line per batch handed "
        "to the trainer, with each group's versions and staleness",
    )
    outage_budget_s: float = Field(
        600.0,
        gt=0,
        description="seconds the tool endpoints may stay down before the run stops with an error. Meanwhile "
        "admission pauses, and groups with a tool call that failed for the infrastructure are discarded and "
        "run again once the KB servers answer (web backend: after a backoff)",
    )


class CpuHarnessConfig(Strict):
    """Switches of the CPU harness (`asearcher train --cpu`) for its tests and benchmarks; nothing reads them
    elsewhere. They travel in the run config, which every actor of the run receives."""

    workload: dict[str, Any] | None = Field(
        None,
        description="the scripted agent's workload (asearcher_plugin/openrlhf/cpu/workload.py, Workload's fields); "
        "needed only with the scripted agent file",
    )
    engine_stats: str | None = Field(None, description="a folder where each engine writes its busy intervals")
    fit_seconds: float = Field(0.0, ge=0, description="seconds added to every training step (a GPU-sized update)")
    skip_weight_load: bool = Field(
        False, description="engines receive every weight broadcast and keep their weights (a learning control)"
    )
    bf16: bool = Field(
        False,
        description="train and decode in bf16, as OpenRLHF asks; by default the harness computes in float32 "
        "(asearcher_plugin/openrlhf/cpu/precision.py: bf16 is emulated on CPUs without bf16 units)",
    )


class RunConfig(Strict):
    """What travels with a training run besides OpenRLHF's flags."""

    agent: AgentConfig = Field(default_factory=AgentConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    cpu_harness: CpuHarnessConfig = Field(default_factory=CpuHarnessConfig)


def load_config(path: str | os.PathLike | None = None) -> AgentConfig:
    """Loads `path`, else the run config in $ASEARCHER_RUN_CONFIG, else the file named by $ASEARCHER_CONFIG, else
    the defaults."""
    if not path and os.environ.get(RUN_CONFIG_ENV):
        return load_run_config_env().agent
    path = path or os.environ.get(CONFIG_ENV)
    if not path:
        return AgentConfig()
    data = read_yaml_mapping(path, ConfigError, label=f"{CONFIG_ENV}={path}")
    if problems := null_sections(data, path, ("agent",)):
        raise ConfigError(problems[0])
    data = data.get("agent", data)  # a recipe keeps the agent section under `agent:`
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {validation_problems(exc)}") from None


def override_agent_config(config: AgentConfig, items: list[str]) -> AgentConfig:
    """`--set agent.a.b=value` (the grammar of `asearcher train --set`) applied to `config`, then the whole config
    validated again, so an unknown key or a bad value is refused before any work starts."""
    if not items:
        return config
    data = config.model_dump(exclude_unset=True)
    for item in items:
        key, value = parse_assignment(item, ConfigError)
        if not key.startswith("agent.") or key == "agent.":
            raise ConfigError(f"--set {key}: only agent.* keys apply here, e.g. agent.max_turns=16")
        set_dotted(data, key.removeprefix("agent."), value, ConfigError)
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"--set: {validation_problems(exc).replace(chr(10), ' ')}") from None


def load_run_config_env() -> RunConfig:
    import json

    raw = os.environ.get(RUN_CONFIG_ENV, "")
    try:
        return RunConfig.model_validate(json.loads(raw))
    except ValueError as exc:
        problem = validation_problems(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ConfigError(f"{RUN_CONFIG_ENV}: {problem}") from None
