"""What every settings schema shares: a strict base (an unknown key is an error) and the error a bad setting raises."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConfigError(ValueError):
    pass


def validation_problems(exc: ValidationError) -> str:
    """Pydantic's errors as `field.path: message; ...`."""
    return "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
