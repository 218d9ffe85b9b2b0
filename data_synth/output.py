"""The run directory: `items.jsonl` (one line per finished seed, with every round's log) and
`train.jsonl` (emitted questions, in the keys the recipes read).

Both files are appended and flushed per item, so a crash loses only the items in flight. On start,
training rows of an item whose `items.jsonl` line never got written are removed, and every
finished seed is skipped; a `failed` seed (endpoint or tools unreachable) is tried again.
"""

from __future__ import annotations

import json
from pathlib import Path

from asearcher_plugin.utils.jsonl import drop_cut_tail

from .config import SynthConfig
from .dedup import NearDuplicates
from .records import SynthItem, Variant

ITEMS = "items.jsonl"
TRAIN = "train.jsonl"


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash
    return rows


def latest_items(out_dir: Path) -> dict[str, SynthItem]:
    """The last line per seed; a seed that failed and later finished counts as finished."""
    latest: dict[str, SynthItem] = {}
    for row in read_jsonl(out_dir / ITEMS):
        item = SynthItem.from_json(row)
        latest[item.seed_id] = item
    return latest


def training_row(result: SynthItem, variant: Variant, k: int) -> dict:
    qa = variant.qa
    return {
        "id": f"{result.seed_id}#r{variant.round}",
        "question": qa.question,
        "answer": qa.answer,
        "golden_answers": qa.golds(),
        "provenance": {
            "seed_id": result.seed_id,
            "source": result.source,
            "seed_question": (result.seed or {}).get("question", ""),
            "round": variant.round,
            "injections": qa.injections,
            "fuzzes": qa.fuzzes,
            "solve_rate": variant.solve_rate,
            "k": k,
            "facts": qa.facts,
            "evidence": [
                {
                    key: e.get(key, "")
                    for key in ("round", "entity", "query", "title", "url", "source", "quote", "fact")
                }
                for e in qa.evidence
            ],
            "edits": qa.edits,
        },
    }


class Output:
    def __init__(self, out_dir: Path, cfg: SynthConfig):
        self.dir, self.cfg = Path(out_dir), cfg
        self.dir.mkdir(parents=True, exist_ok=True)
        items = latest_items(self.dir)
        self.finished = {sid for sid, item in items.items() if item.finished}
        self.dedup = NearDuplicates(cfg.dedup_threshold)
        train = [r for r in read_jsonl(self.dir / TRAIN) if r["provenance"]["seed_id"] in self.finished]
        with open(self.dir / TRAIN, "w", encoding="utf-8") as fh:
            for row in train:
                self.dedup.add(row["id"], row["question"])
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.emitted = len(train)
        drop_cut_tail(self.dir / ITEMS)
        self._items = open(self.dir / ITEMS, "a", encoding="utf-8")
        self._train = open(self.dir / TRAIN, "a", encoding="utf-8")

    def write(self, result: SynthItem) -> None:
        emitted = 0
        for variant in result.variants:
            row = training_row(result, variant, self.cfg.k)
            duplicate = self.dedup.add(row["id"], row["question"])
            if duplicate:
                variant.duplicate_of = duplicate
                continue
            self._train.write(json.dumps(row, ensure_ascii=False) + "\n")
            emitted += 1
        result.emitted = emitted
        self.emitted += emitted
        if result.status == "done" and not emitted:
            result.status, result.reason = "dropped", "near-duplicate"
        self._train.flush()
        self._items.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
        self._items.flush()
        if result.finished:
            self.finished.add(result.seed_id)

    def close(self) -> None:
        self._items.close()
        self._train.close()
