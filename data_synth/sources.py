"""Where seeds come from: a JSONL file of question/answer pairs, or pages of a local KB."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from asearcher_plugin.rewards.reward import parse_gold


class SeedError(ValueError):
    pass


def seed_id(question: str, answer: str) -> str:
    return "q" + hashlib.sha1(f"{question}\x00{answer}".encode()).hexdigest()[:12]


def load_seeds(path: str | Path, strict: bool = False) -> tuple[list[dict], list[str]]:
    """Seeds from JSONL rows with `question` and `answer` (a string) or `golden_answers` (a list).

    Returns the seeds and one message per skipped line (file:line and why); `strict` raises on the first.
    """
    p = Path(path)
    if not p.is_file():
        raise SeedError(f"{path}: file not found")
    seeds, problems, ids = [], [], set()
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            question = row.get("question")
            if not isinstance(question, str) or not question.strip():
                raise ValueError("no `question` string")
            label = row.get("answer", row.get("golden_answers"))
            golds = [g.strip() for g in parse_gold(label) if str(g).strip()] if label is not None else []
            if not golds:
                raise ValueError("no `answer` (or `golden_answers`)")
        except ValueError as exc:
            msg = f"{p}:{n}: {exc}"
            if strict:
                raise SeedError(msg) from None
            problems.append(msg)
            continue
        sid = str(row.get("id") or seed_id(question, golds[0]))
        if sid in ids:
            problems.append(f"{p}:{n}: duplicate id {sid}")
            continue
        ids.add(sid)
        seeds.append({"id": sid, "question": question.strip(), "answer": golds[0], "aliases": golds[1:]})
    return seeds, problems


def kb_page_seeds(kb_dir: str | Path, n: int, seed: int = 0, min_chars: int = 1500) -> list[dict]:
    """`n` random pages of a built KB, each the source of one base question."""
    from local_retriever.pages import PAGES_FILE, PageStore

    path = Path(kb_dir) / PAGES_FILE
    if not path.is_file():
        raise SeedError(f"{kb_dir}: no {PAGES_FILE}; build it with `asearcher kb build`")
    return [{"id": "page:" + page["url"], "page": page} for page in PageStore(path).sample(n, seed, min_chars)]
