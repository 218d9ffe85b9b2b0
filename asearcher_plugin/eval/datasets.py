"""Evaluation datasets: FlashRAG JSONL, ASearcher's test files, any JSONL/JSON/Parquet with named keys, built-ins.

Every item becomes `{"id", "question", "golden_answers": [str], "dataset"}`. A row without the
question or answer field is an error naming the file and line.

ASearcher's layout (`evaluation/search_eval_async.py`) is `{data_dir}/{name}/{split}.jsonl`, else
`{split}.json` holding a JSON array; the dataset is named by its folder, the answer is `answer`, else
`gt`, and a question's id is its 0-based position in the file (ASearcher ignores ids in the rows), so
per-question results line up with ASearcher's own output files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

BUILTIN = {"sample": "the questions on the bundled Wikipedia sample (local_retriever/data/sample_questions.jsonl)"}
QUESTION_KEYS = ("question", "input", "query", "prompt")
ANSWER_KEYS = ("golden_answers", "answer", "gt", "answers", "gold", "label")
RESERVED = "overall"  # metrics.json's entry over all datasets


class DatasetError(ValueError):
    pass


def load_dataset(
    spec: str,
    question_key: str | None = None,
    answer_key: str | None = None,
    limit: int | None = None,
    name: str | None = None,
) -> list[dict]:
    """`spec` is a built-in name or a path (.jsonl/.json/.parquet); `name` overrides the dataset name."""
    path, default = _resolve(spec)
    return _rows(path, name or default, question_key, answer_key, limit)


def asearcher_layout(data_dir: str | Path, data_names: str, split: str = "test") -> list[tuple[Path, str]]:
    """(file, dataset name) for ASearcher's `--data_dir DIR --data_names A,B`: `DIR/A/{split}.jsonl` or `.json`."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DatasetError(f"--data-dir {root} is not a folder")
    names = [n.strip() for n in data_names.split(",") if n.strip()]
    if not names:
        raise DatasetError(f"--data-names {data_names!r} names no dataset; give e.g. GAIA,Frames")
    out = []
    for name in names:
        candidates = [root / name / f"{split}.jsonl", root / name / f"{split}.json"]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            raise DatasetError(f"dataset {name!r}: neither {candidates[0]} nor {candidates[1]} exists")
        out.append((path, name))
    return out


def load_datasets(
    specs: list[str],
    question_key: str | None = None,
    answer_key: str | None = None,
    limit: int | None = None,
    named: list[tuple[Path, str]] | None = None,
) -> list[dict]:
    """Items of several datasets, each under a distinct dataset name.

    Results are keyed by (dataset, id, seed) and FlashRAG files all use ids like `test_0`, so two
    datasets sharing a name would overwrite each other's items. Files with the same stem are named
    by their folder instead (`GAIA/test.jsonl`, `Frames/test.jsonl` -> `GAIA`, `Frames`). `named`
    files (from `asearcher_layout`) keep the name given and ASearcher's positional ids.
    """
    items = []
    for path, name, positional in plan_datasets(specs, named):
        items += _rows(path, name, question_key, answer_key, limit, positional)
    return items


def plan_datasets(specs: list[str], named: list[tuple[Path, str]] | None = None) -> list[tuple[Path, str, bool]]:
    """(file, dataset name, positional ids) of each dataset `load_datasets` reads, named as it names them."""
    resolved = [(spec, *_resolve(spec)) for spec in specs]
    stems: dict[str, int] = {}
    for _, _, stem in resolved:
        stems[stem] = stems.get(stem, 0) + 1
    names: dict[str, Path] = {}
    todo = [
        (path, stem if stems[stem] == 1 else (path.resolve().parent.name or stem), False) for _, path, stem in resolved
    ]
    todo += [(Path(path), name, True) for path, name in named or []]
    for path, name, _ in todo:
        if name in names:
            raise DatasetError(
                f"datasets {names[name]} and {path} would both be named {name!r}; "
                "give them distinct file or folder names"
            )
        if name == RESERVED:
            raise DatasetError(
                f"{path}: the dataset name {RESERVED!r} is taken by the all-datasets results; rename the file"
            )
        names[name] = path
    return todo


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
    """(line or item number, row) pairs; a `.json` file may hold one JSON array (ASearcher's `test.json`)."""
    if path.suffix == ".json" and _starts_with_array(path):
        rows = _parse(path.read_bytes(), path, None)
        if not isinstance(rows, list):
            raise DatasetError(f"{path}: expected a JSON array of objects")
        yield from enumerate(rows, 1)
        return
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DatasetError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield i, row
        return
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            yield i, _parse(raw, path, i)


def _parse(raw: bytes, path: Path, line: int | None):
    """The JSON value in `raw` (a whole file when `line` is None, else that line of it), or a DatasetError naming
    where and what: invalid JSON, bytes that are not UTF-8, nesting deeper than Python parses."""
    where = f"{path}:{line}" if line is not None else str(path)
    try:
        return json.loads(raw.decode("utf-8"))
    except json.JSONDecodeError as exc:
        at = f"{path}:{exc.lineno if line is None else line}"
        raise DatasetError(f"{at}: invalid JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise DatasetError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. a number too long to read
        raise DatasetError(f"{where}: invalid JSON ({str(exc)[:100]})") from None


def _starts_with_array(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as fh:  # a sniff: bad bytes are named when read
        head = fh.read(4096).lstrip("\ufeff \t\r\n")
    return head.startswith("[")


def _rows(
    path: Path, name: str, qk: str | None, ak: str | None, limit: int | None, positional: bool = False
) -> list[dict]:
    out = []
    seen: dict[str, int] = {}
    for line_no, row in _records(path):
        where = f"{path}:{line_no}"
        question, answers = _question_and_answers(row, where, qk, ak)
        item_id = str(len(out)) if positional else str(row.get("id", f"{name}_{line_no}"))
        if item_id in seen:
            raise DatasetError(
                f"{path}: id {item_id!r} on line {seen[item_id]} and again on line {line_no}; "
                "ids must be unique within a dataset"
            )
        seen[item_id] = line_no
        out.append({"id": item_id, "question": question, "golden_answers": answers, "dataset": name})
        if limit and len(out) >= limit:
            break
    return out


def _question_and_answers(row, where: str, qk: str | None, ak: str | None) -> tuple[str, list[str]]:
    """One row's question and gold answers, by the given keys or the first known key present; `where` names
    the line in errors."""
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: expected a JSON object")
    q_key = qk or next((k for k in QUESTION_KEYS if k in row), None)
    a_key = ak or next((k for k in ANSWER_KEYS if k in row), None)
    if q_key is None or q_key not in row:
        raise DatasetError(f"{where}: no question field ({qk or ' / '.join(QUESTION_KEYS)}); set --question-key")
    if a_key is None or a_key not in row:
        raise DatasetError(f"{where}: no answer field ({ak or ' / '.join(ANSWER_KEYS)}); set --answer-key")
    answers = row[a_key]
    if isinstance(answers, (str, int, float)) and not isinstance(answers, bool):
        answers = [answers]  # GAIA-style numeric answers are kept as their text
    if not isinstance(answers, list) or not answers:
        raise DatasetError(f"{where}: {a_key!r} must be a string or a non-empty list")
    if any(isinstance(a, float) and not math.isfinite(a) for a in answers):
        raise DatasetError(f"{where}: {a_key!r} holds {answers!r:.60}: a gold answer is text or a finite number")
    if problem := text_problem(row[q_key], q_key) or (f"{a_key!r} holds a null" if None in answers else None):
        raise DatasetError(f"{where}: {problem}")  # str() would make it the text "None"
    return str(row[q_key]), [str(a) for a in answers]


def text_problem(value, key: str) -> str | None:
    """Why a row's question field cannot be asked (null, empty, not text), or None when it can."""
    if value is None:
        return f"{key!r} is null"
    if not isinstance(value, str):
        return f"{key!r} must be a string, got {type(value).__name__}"
    return f"{key!r} is empty" if not value.strip() else None


def count_rows(path: Path) -> int:
    """Records in a dataset file, as they are read (blank lines skipped)."""
    return sum(1 for _ in _records(Path(path)))
