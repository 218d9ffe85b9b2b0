"""The grammar every `asearcher` sub-command shares, so a flag means the same thing everywhere.

- several URLs: a repeatable flag that also takes comma-separated values (`--url a --url b` == `--url a,b`);
- an output location: `--out DIR`; older spellings stay as hidden aliases that print a deprecation note;
- choices: `Enum` options, refused by the parser before any work starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import get_args

import typer


def choice(name: str, values) -> type[Enum]:
    """A str Enum of `values` (a Literal type, or strings) for a typer option: click refuses anything else."""
    return Enum(name, {v: v for v in (get_args(values) or values)}, type=str)


def split_list(values: Iterable[str] | str | None) -> list[str]:
    """Repeated and comma-separated flag values (URLs, names) as one list, in order, blanks dropped."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [u.strip() for v in values for u in v.split(",") if u.strip()]


def deprecated(old: str, new: str) -> None:
    typer.echo(f"note: {old} is deprecated; use {new}", err=True)


def out_dir(out: str | None, legacy: str | None, legacy_spelling: str, default: str | None = None) -> str:
    """`--out DIR`, else an old spelling of it (with a note), else `default`; both given is an error."""
    if out is not None and legacy is not None:
        raise typer.BadParameter(f"give --out or {legacy_spelling}, not both", param_hint="--out")
    if legacy is not None:
        deprecated(legacy_spelling, "--out DIR")
        return legacy
    if out is None and default is None:
        raise typer.BadParameter("an output folder is required", param_hint="--out")
    return out if out is not None else default
