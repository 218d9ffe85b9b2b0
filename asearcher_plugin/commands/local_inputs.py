"""Inputs a laptop recipe names that can be made on the spot, with no hub: the tiny model and the sample prompts.

`recipes/cpu_tiny.yaml` points at `runs/tiny-model` and `runs/sample_prompts.jsonl`; `asearcher rollout` and
`asearcher train` with it work in a fresh checkout because these two are made when missing. Any other path must exist.
"""

from __future__ import annotations

import json
from pathlib import Path

TINY_MODEL = Path("runs/tiny-model")
SAMPLE_PROMPTS = Path("runs/sample_prompts.jsonl")


class MissingInput(FileNotFoundError):
    pass


def ensure_local_inputs(model: Path, prompts: Path) -> None:
    """Makes the tiny model or the sample prompts if those are the paths named; fails naming any other missing path."""
    model, prompts = Path(model), Path(prompts)
    make_local_inputs(model, prompts)
    if not model.exists():
        raise MissingInput(f"model not found: {model} (a local path; no model hub is used)")


DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".arrow", ".txt")


def missing_local_paths(named: dict[str, str | None]) -> list[str]:
    """{flag: value} -> a line for each value that is a local path and is not there. A value is taken for a hub name
    (a model or dataset id, `org/name`) when it has one slash, no leading `/`, `.` or `~`, and no data file suffix;
    the rest must exist where the run starts."""
    problems = []
    for flag, value in named.items():
        if not value or Path(value).expanduser().exists():
            continue
        local = value.count("/") != 1 or value.startswith(("/", ".", "~")) or value.endswith(DATA_SUFFIXES)
        if local:
            problems.append(f"{flag}: {value} not found (a local path, read from {Path.cwd()})")
    return problems


def make_local_inputs(model: str | Path | None, prompts: str | Path | None) -> None:
    """Makes the tiny model and the sample prompts when those are the paths a recipe names (`asearcher train
    cpu_tiny` in a fresh checkout); any other path, a hub name or a file on shared storage, is left to the trainer."""
    if model is not None and Path(model) == TINY_MODEL:
        from ..engines.tiny_model import ensure_tiny_model

        ensure_tiny_model(TINY_MODEL)
    if prompts is not None and Path(prompts) == SAMPLE_PROMPTS and not SAMPLE_PROMPTS.exists():
        from local_retriever.sample import load_sample_questions

        SAMPLE_PROMPTS.parent.mkdir(parents=True, exist_ok=True)
        SAMPLE_PROMPTS.write_text("".join(json.dumps(q) + "\n" for q in load_sample_questions()))
