"""Inputs a laptop recipe names that can be made on the spot, with no hub: the tiny model and the sample prompts.

`recipes/cpu_tiny.yaml` points at `runs/tiny-model` and `runs/sample_prompts.jsonl`; `asearcher rollout` with it
works in a fresh checkout because these two are made when missing. Any other path must exist.
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
    if model == TINY_MODEL:
        from .engines.tiny_model import ensure_tiny_model

        ensure_tiny_model(model)
    if prompts == SAMPLE_PROMPTS and not prompts.exists():
        from local_retriever.sample import load_sample_questions

        prompts.parent.mkdir(parents=True, exist_ok=True)
        prompts.write_text("".join(json.dumps(q) + "\n" for q in load_sample_questions()))
    if not model.exists():
        raise MissingInput(f"model not found: {model} (a local path; no model hub is used)")
