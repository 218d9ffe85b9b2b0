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


class DatasetError(ValueError):
    pass


def load_dataset(spec: str, question_key: str | None = None, answer_key: str | None = None,
                 limit: int | None = None) -> list[dict]:
    """`spec` is a built-in name or a path (.jsonl/.json/.parquet)."""
    if spec in BUILTIN:
        from local_retriever.sample import SAMPLE_QUESTIONS_PATH

        return _rows(SAMPLE_QUESTIONS_PATH, "sample", question_key, answer_key, limit)
    path = Path(spec)
    if not path.is_file():
        valid = ", ".join(f"{k} ({v})" for k, v in BUILTIN.items())
        raise DatasetError(f"unknown dataset {spec!r}: not a file and not a built-in; built-ins are: {valid}")
    return _rows(path, path.stem, question_key, answer_key, limit)


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
        out.append({"id": str(row.get("id", f"{name}_{line_no}")), "question": str(row[q_key]),
                    "golden_answers": [str(a) for a in answers], "dataset": name})
        if limit and len(out) >= limit:
            break
    return out
