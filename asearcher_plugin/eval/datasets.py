"""Evaluation datasets: FlashRAG JSONL, ASearcher's test JSONL, any JSONL/Parquet with named keys, built-ins.

Every item becomes `{"id", "question", "golden_answers": [str], "dataset"}`. A row without the
question or answer field is an error naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path

BUILTIN = {"sample": "the questions on the bundled Wikipedia sample (local_retriever/data/sample_questions.jsonl)"}
QUESTION_KEYS = ("question", "input", "query", "prompt")
ANSWER_KEYS = ("golden_answers", "answer", "answers", "gold", "label")
RESERVED = "overall"  # metrics.json's entry over all datasets


class DatasetError(ValueError):
    pass


def load_dataset(spec: str, question_key: str | None = None, answer_key: str | None = None,
                 limit: int | None = None, name: str | None = None) -> list[dict]:
    """`spec` is a built-in name or a path (.jsonl/.json/.parquet); `name` overrides the dataset name."""
    path, default = _resolve(spec)
    return _rows(path, name or default, question_key, answer_key, limit)


def load_datasets(specs: list[str], question_key: str | None = None, answer_key: str | None = None,
                  limit: int | None = None) -> list[dict]:
    """Items of several datasets, each under a distinct dataset name.

    Results are keyed by (dataset, id, seed) and FlashRAG files all use ids like `test_0`, so two
    datasets sharing a name would overwrite each other's items. Files with the same stem are named
    by their folder instead (`GAIA/test.jsonl`, `Frames/test.jsonl` -> `GAIA`, `Frames`).
    """
    resolved = [(spec, *_resolve(spec)) for spec in specs]
    stems: dict[str, int] = {}
    for _, _, stem in resolved:
        stems[stem] = stems.get(stem, 0) + 1
    names: dict[str, Path] = {}
    items = []
    for spec, path, stem in resolved:
        name = stem if stems[stem] == 1 else (path.resolve().parent.name or stem)
        if name in names:
            raise DatasetError(f"datasets {names[name]} and {path} would both be named {name!r}; "
                               "give them distinct file or folder names")
        if name == RESERVED:
            raise DatasetError(f"{path}: the dataset name {RESERVED!r} is taken by the all-datasets results; rename the file")
        names[name] = path
        items += _rows(path, name, question_key, answer_key, limit)
    return items


def _resolve(spec: str) -> tuple[Path, str]:
    if spec in BUILTIN:
        from local_retriever.sample import SAMPLE_QUESTIONS_PATH

        return Path(SAMPLE_QUESTIONS_PATH), "sample"
    path = Path(spec)
    if not path.is_file():
        valid = ", ".join(f"{k} ({v})" for k, v in BUILTIN.items())
        raise DatasetError(f"unknown dataset {spec!r}: not a file and not a built-in; built-ins are: {valid}")
    return path, path.stem


def _records(path: Path):
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DatasetError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield i, row
        return
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{i}: invalid JSON ({exc.msg})") from None


def _rows(path: Path, name: str, qk: str | None, ak: str | None, limit: int | None) -> list[dict]:
    out = []
    seen: dict[str, int] = {}
    for line_no, row in _records(path):
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{line_no}: expected a JSON object")
        q_key = qk or next((k for k in QUESTION_KEYS if k in row), None)
        a_key = ak or next((k for k in ANSWER_KEYS if k in row), None)
        if q_key is None or q_key not in row:
            raise DatasetError(f"{path}:{line_no}: no question field ({qk or ' / '.join(QUESTION_KEYS)}); "
                               "set --question-key")
        if a_key is None or a_key not in row:
            raise DatasetError(f"{path}:{line_no}: no answer field ({ak or ' / '.join(ANSWER_KEYS)}); set --answer-key")
        answers = row[a_key]
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list) or not answers:
            raise DatasetError(f"{path}:{line_no}: {a_key!r} must be a string or a non-empty list")
        if problem := text_problem(row[q_key], q_key) or (f"{a_key!r} holds a null" if None in answers else None):
            raise DatasetError(f"{path}:{line_no}: {problem}")  # str() would make it the text "None"
        item_id = str(row.get("id", f"{name}_{line_no}"))
        if item_id in seen:
            raise DatasetError(f"{path}: id {item_id!r} on line {seen[item_id]} and again on line {line_no}; "
                               "ids must be unique within a dataset")
        seen[item_id] = line_no
        out.append({"id": item_id, "question": str(row[q_key]), "golden_answers": [str(a) for a in answers],
                    "dataset": name})
        if limit and len(out) >= limit:
            break
    return out


def text_problem(value, key: str) -> str | None:
    """Why a row's question field cannot be asked (null, empty, not text), or None when it can."""
    if value is None:
        return f"{key!r} is null"
    if not isinstance(value, str):
        return f"{key!r} must be a string, got {type(value).__name__}"
    return f"{key!r} is empty" if not value.strip() else None
