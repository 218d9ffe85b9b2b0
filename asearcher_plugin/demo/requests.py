"""What the page may ask for, checked before anything runs: a bad field gets one message naming it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..settings.config import AgentType

MAX_QUESTION_CHARS = 4_000  # the longest benchmark questions (GAIA, BrowseComp) are well under this
MAX_FIELD_CHARS = 2_000
ModelKind = Literal["tiny", "hf", "openai", "reference"]


class RequestError(ValueError):
    """A run request the demo refuses; the message is shown on the page as it is."""


def _valid_text(value: str, field: str) -> str:
    """Text that is valid Unicode: a lone surrogate (from a broken paste) cannot reach a tokenizer or a JSON body."""
    for i, ch in enumerate(value):
        if "\ud800" <= ch <= "\udfff":
            raise ValueError(
                f"{field} holds a lone surrogate (U+{ord(ch):04X}) at character {i + 1}: it is not valid "
                "Unicode text; retype or re-paste it"
            )
    return value


class ModelChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ModelKind = "tiny"
    path: str = Field("", max_length=MAX_FIELD_CHARS, description="kind hf: a local transformers model folder")
    url: str = Field("", max_length=MAX_FIELD_CHARS, description="kind openai: base URL, e.g. http://host:8000/v1")
    name: str = Field("default", max_length=200, description="kind openai: the model name on that server")
    tokenizer: str = Field("", max_length=MAX_FIELD_CHARS, description="kind openai: tokenizer path or name")

    @field_validator("path", "url", "name", "tokenizer")
    @classmethod
    def _text(cls, v: str, info) -> str:
        return _valid_text(v.strip(), f"model {info.field_name}")

    @model_validator(mode="after")
    def _needs(self) -> ModelChoice:
        if self.kind == "hf" and not self.path:
            raise ValueError("model: a local HF model needs its folder path")
        if self.kind == "openai":
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(
                    f"model url: {self.url or '(empty)'!r} is not an http(s) URL, e.g. http://host:8000/v1"
                )
        return self


class ToolsChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "web"] = "local"
    kb_url: str = Field("", max_length=MAX_FIELD_CHARS)

    @field_validator("kb_url")
    @classmethod
    def _url(cls, v: str) -> str:
        v = _valid_text(v.strip(), "KB URL")
        if v and not v.startswith(("http://", "https://")):
            raise ValueError(f"KB URL {v!r} is not an http(s) URL, e.g. http://127.0.0.1:5005")
        return v


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str
    gold: str = Field("", description="gold answers, one per line or separated by |")
    model: ModelChoice = Field(default_factory=ModelChoice)
    tools: ToolsChoice = Field(default_factory=ToolsChoice)
    agent_type: AgentType = "asearcher"
    max_turns: int = Field(6, ge=1, le=64)
    max_new_tokens_per_turn: int = Field(256, ge=1, le=8192)
    max_length: int = Field(4096, ge=256, le=131_072, description="token budget of the whole trajectory")
    temperature: float = Field(0.6, ge=0, le=2)
    seed: int = Field(0, ge=0, le=2**31)

    @field_validator("question")
    @classmethod
    def _question(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("question is empty: type a question")
        if len(v) > MAX_QUESTION_CHARS:
            raise ValueError(f"question is {len(v):,} characters long; the demo takes at most {MAX_QUESTION_CHARS:,}")
        return _valid_text(v.strip(), "question")

    @field_validator("gold")
    @classmethod
    def _gold(cls, v: str) -> str:
        if len(v) > MAX_FIELD_CHARS:
            raise ValueError(f"gold answer is {len(v):,} characters long; at most {MAX_FIELD_CHARS:,}")
        return _valid_text(v, "gold answer")

    @property
    def golds(self) -> list[str]:
        parts = self.gold.replace("|", "\n").splitlines()
        return [p.strip() for p in parts if p.strip()]


def parse_request(data) -> RunRequest:
    """A `RunRequest`, or RequestError naming every field that is wrong."""
    if not isinstance(data, dict):
        raise RequestError("a run request is a JSON object")
    try:
        return RunRequest.model_validate(data)
    except ValidationError as exc:
        raise RequestError("; ".join(_message(e) for e in exc.errors(include_url=False))) from None


def _message(error: dict) -> str:
    """Our own checks name their field already; pydantic's own (a wrong type, a number out of range) get it added."""
    text = error.get("msg", "invalid").removeprefix("Value error, ")
    if error.get("type") == "value_error":
        return text
    return f"{'.'.join(str(p) for p in error.get('loc', ()))}: {text}"
