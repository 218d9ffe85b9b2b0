"""Synthesis configuration: a YAML file (or none) plus command-line overrides, validated up front."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from asearcher_plugin.settings.config import validation_problems
from asearcher_plugin.settings.yamlio import read_yaml_mapping, set_dotted
from asearcher_plugin.tools.config import ToolsConfig
from local_retriever.endpoints import EndpointConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatEndpointConfig(EndpointConfig):
    """One OpenAI-compatible chat endpoint (the shared shape: base_urls, api_key_env, timeout, retries) and how
    synthesis samples from it."""

    model: str = "default"
    temperature: float = Field(0.8, ge=0.0, le=2.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_tokens: int = Field(4096, ge=16)


class SynthConfig(_Strict):
    generator: ChatEndpointConfig = Field(
        default_factory=ChatEndpointConfig, description="writes, injects, fuzzes, answers without tools"
    )
    judge: ChatEndpointConfig = Field(
        default_factory=lambda: ChatEndpointConfig(temperature=0.0, max_tokens=1024),
        description="quality verdicts, grading of tool-free answers, uniqueness",
    )
    tools: ToolsConfig = Field(
        default_factory=ToolsConfig, description="search backend for injection (local KB or web)"
    )
    rounds: int = Field(6, ge=1, le=64, description="injection/fuzzing rounds per item at most")
    actions: list[Literal["inject", "fuzz"]] = Field(
        default_factory=lambda: ["inject", "inject", "fuzz"],
        description="the cycle of actions, one per round (paper: ~2 injections per fuzz)",
    )
    search_topk: int = Field(5, ge=1, le=20, description="passages shown to the generator for one injection")
    page_passages: int = Field(
        2,
        ge=0,
        le=10,
        description="further passages of the top hit's page (read with "
        "the access tool, the ones naming the entity first) shown beside the search results",
    )
    k: int = Field(8, ge=1, le=64, description="tool-free answers per difficulty check (paper: 8)")
    max_solve_rate: float = Field(
        0.25, ge=0.0, le=1.0, description="a question answered correctly without tools more often is not emitted"
    )
    stop_when_unsolved: bool = Field(True, description="stop an item once no tool-free answer is correct")
    max_uniqueness_checks: int = Field(4, ge=0, description="distinct wrong answers checked for being valid too")
    max_variants_per_seed: int = Field(3, ge=1, description="emitted questions per seed, hardest last (paper: 3)")
    output_retries: int = Field(
        2,
        ge=0,
        description="re-asks after a malformed or rejected model reply (a "
        "grading verdict is re-asked within the judge endpoint's retries)",
    )
    concurrency: int = Field(16, ge=1, description="items in flight")
    dedup_threshold: float = Field(
        0.8, gt=0.0, le=1.0, description="MinHash Jaccard above which questions are duplicates"
    )
    page_chars: int = Field(6000, ge=500, description="characters of a KB page shown when writing its base question")
    evidence_chars: int = Field(1200, ge=100, description="characters of each passage shown for an injection")

    @model_validator(mode="after")
    def _actions_not_empty(self):
        if not self.actions:
            raise ValueError("actions: give at least one of inject, fuzz")
        return self


class SynthConfigError(ValueError):
    pass


def load_synth_config(path: str | Path | None, overrides: dict | None = None) -> SynthConfig:
    """The file's settings (or the defaults), with `overrides` (dotted keys) applied on top."""
    data = read_yaml_mapping(path, SynthConfigError) if path else {}
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value, SynthConfigError)
    try:
        return SynthConfig.model_validate(data)
    except ValidationError as exc:
        raise SynthConfigError(f"{path or 'synth config'}: {validation_problems(exc)}") from None
