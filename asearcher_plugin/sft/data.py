"""`asearcher sft-data`: a teacher's trajectories -> a token-exact SFT dataset (rejection-sampling fine-tuning).

Input: the `trajectories.jsonl` of `asearcher eval` or `asearcher rollout`, whatever model or policy produced it. Each
row carries its training sequences as the engine saw and produced them (`sequences`: token ids and the spans the
model generated). Trajectories are kept by reward (a threshold, then the best k of each question); each kept sequence
becomes one row `{"input_ids", "loss_mask", ...}` whose mask is 1 exactly on the tokens the model generated, so the
prompt, the tool results and the page text are never trained on. Nothing is re-tokenised: a trainer that reads the
row sees the ids the engine saw. Questions, not sequences, are split train / held-out, so no held-out question has
a sequence in training; a sequence met twice is written once.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

TRAIN_FILE, HELDOUT_FILE, MANIFEST_FILE = "train.jsonl", "heldout.jsonl", "manifest.json"


class SFTDataError(ValueError):
    pass


@dataclass
class Candidate:
    """One trajectory read from a file: its question, seed, reward and token sequences."""

    question_id: str
    seed: int
    reward: float
    truncated: bool
    sequences: list[dict] | None
    where: str  # file:line, for messages
    status: str = "ok"


@dataclass
class Selection:
    """What was kept and what was dropped, and why."""

    kept: list[Candidate] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # reason -> trajectories
    sequences: Counter = field(default_factory=Counter)  # split -> sequences written
    dropped_sequences: Counter = field(default_factory=Counter)  # reason -> sequences
    questions: Counter = field(default_factory=Counter)  # split -> questions with a kept sequence
    loss_tokens: Counter = field(default_factory=Counter)  # split -> tokens in the loss

    def summary(self) -> dict:
        return {
            "trajectories_read": len(self.kept) + sum(self.dropped.values()),
            "trajectories_kept": len(self.kept),
            "trajectories_dropped": dict(self.dropped),
            "sequences_written": dict(self.sequences),
            "sequences_dropped": dict(self.dropped_sequences),
            "questions": dict(self.questions),
            "loss_tokens": dict(self.loss_tokens),
        }


def trajectory_files(paths: list[str | Path]) -> list[Path]:
    """Files as given; a folder means its `trajectories.jsonl`."""
    out = []
    for p in map(Path, paths):
        f = p / "trajectories.jsonl" if p.is_dir() else p
        if not f.is_file():
            raise SFTDataError(f"{p}: no such file (give a trajectories.jsonl or the folder holding one)")
        out.append(f)
    if not out:
        raise SFTDataError("no trajectories given")
    return out


MAX_TOKEN_ID = 2**31 - 1  # any vocabulary's ids fit; a negative or larger one is not a token


class RowProblem(ValueError):
    """One row that cannot be read: its field and what was wrong. The row is skipped; the rest are kept."""


def _field(row: dict, name: str, kinds: tuple[type, ...], default=None, required: bool = False):
    if name not in row or row[name] is None:
        if required:
            raise RowProblem(f"field {name!r} is missing")
        return default
    value = row[name]
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise RowProblem(f"field {name!r} is {type(value).__name__} {str(value)[:40]!r}, not {kinds[0].__name__}")
    if isinstance(value, float) and value != value and float in kinds and name != "reward":
        raise RowProblem(f"field {name!r} is NaN")
    if isinstance(value, float) and abs(value) == float("inf"):
        raise RowProblem(f"field {name!r} is {value}")
    return value


def _int(value, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RowProblem(f"{what} is {str(value)[:40]!r}, not an integer in [{low}, {high}]")
    return value


def _sequences(row: dict) -> list[dict] | None:
    seqs = _field(row, "sequences", (list,))
    if seqs is None:
        return None
    for i, seq in enumerate(seqs):
        if not isinstance(seq, dict):
            raise RowProblem(f"field 'sequences'[{i}] is {type(seq).__name__}, not an object")
        tokens = seq.get("tokens")
        if not isinstance(tokens, list):
            raise RowProblem(f"field 'sequences'[{i}].tokens is not a list of token ids")
        for j, t in enumerate(tokens):
            _int(t, f"field 'sequences'[{i}].tokens[{j}]", 0, MAX_TOKEN_ID)
        ranges = seq.get("action_ranges") or []
        if not isinstance(ranges, list):
            raise RowProblem(f"field 'sequences'[{i}].action_ranges is not a list of [start, end]")
        for j, span in enumerate(ranges):
            if not isinstance(span, list) or len(span) != 2:
                raise RowProblem(f"field 'sequences'[{i}].action_ranges[{j}] is not a [start, end] pair")
            start, end = (_int(v, f"field 'sequences'[{i}].action_ranges[{j}]", 0, len(tokens)) for v in span)
            if start >= end:
                raise RowProblem(f"field 'sequences'[{i}].action_ranges[{j}] {span} is empty or reversed")
    return seqs


def _candidate(row, where: str, order: int) -> tuple[tuple, Candidate]:
    if not isinstance(row, dict):
        raise RowProblem(f"a row is a JSON object, not {type(row).__name__}")
    if "id" in row and "dataset" in row:  # asearcher eval
        dataset, qid = _field(row, "dataset", (str,), required=True), _field(row, "id", (str, int), required=True)
        question_id = f"{dataset}/{qid}"
        seed = _int(_field(row, "seed", (int,), default=0), "field 'seed'", 0, MAX_TOKEN_ID)
    elif "prompt" in row:  # asearcher rollout: one row per sample, no ids
        question_id, seed = f"prompt/{_field(row, 'prompt', (str,), required=True)}", order
    else:
        raise RowProblem("neither an eval row (dataset, id) nor a rollout row (prompt)")
    reward = _field(row, "reward", (int, float))
    cand = Candidate(
        question_id=question_id,
        seed=seed,
        reward=float("nan") if reward is None else float(reward),
        truncated=_field(row, "truncated", (bool,), default=False),
        sequences=_sequences(row),
        where=where,
        status=_field(row, "status", (str,), default="ok"),
    )
    key = (question_id, seed) if "id" in row else (question_id, seed, "rollout")
    return key, cand


def read_candidates(path: Path, problems: list[str] | None = None) -> list[Candidate]:
    """Eval rows (`dataset`, `id`, `seed`, `status`) and rollout rows (`prompt`); a retried eval item counts once,
    by its scored attempt. A row that cannot be read is skipped and named in `problems` (`file:line: field ...`);
    a last line cut by a crash is skipped quietly, as the eval reader does."""
    problems = [] if problems is None else problems
    by_key: dict[tuple, Candidate] = {}
    order = 0
    lines = path.read_bytes().split(b"\n")
    for line_no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RowProblem(f"not UTF-8 text (byte {exc.start})") from None
            try:
                row = json.loads(line)
            except RecursionError:
                raise RowProblem("JSON nested too deeply") from None
            except ValueError as exc:  # JSONDecodeError, and numbers too long to read
                if line_no == len(lines):  # the last line, without its newline: cut by a crash
                    continue
                raise RowProblem(f"not JSON ({str(exc)[:80]})") from None
            key, cand = _candidate(row, where, order)
        except RowProblem as exc:
            problems.append(f"{where}: {exc}")
            continue
        order += 1
        if key not in by_key or cand.status == "ok":
            by_key[key] = cand
    return list(by_key.values())


def select(
    candidates: list[Candidate], min_reward: float, best_of: int | None, keep_truncated: bool = False
) -> Selection:
    """Rejection sampling: scored, finished, reward >= `min_reward`, then the `best_of` highest rewards of each
    question (ties: lower seed first)."""
    sel = Selection()
    passing: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates:
        if c.status != "ok":
            sel.dropped[f"not scored (status {c.status})"] += 1
        elif not c.sequences:
            sel.dropped["no token record (written before eval kept `sequences`: run the eval again)"] += 1
        elif c.truncated and not keep_truncated:
            sel.dropped["truncated (ran out of tokens before answering)"] += 1
        elif not c.reward >= min_reward:  # NaN fails too
            sel.dropped[f"reward below {min_reward:g}"] += 1
        else:
            passing[c.question_id].append(c)
    # question by question: the dataset is the same whatever order the eval finished its trajectories in (an SFT run
    # read in another order learnt the answer's copy or did not, measured)
    for question_id in sorted(passing):
        group = passing[question_id]
        group.sort(key=lambda c: (-c.reward, c.seed))
        cut = len(group) if best_of is None else best_of
        sel.kept += group[:cut]
        if len(group) > cut:
            sel.dropped[f"not among the best {best_of} of its question"] += len(group) - cut
    return sel


def loss_mask(tokens: list[int], action_ranges: list, where: str = "") -> list[int]:
    """1 on every token inside a generated span, 0 elsewhere (prompt, tool output)."""
    mask = [0] * len(tokens)
    for span in action_ranges:
        start, end = span
        if not (0 <= start < end <= len(tokens)):
            raise SFTDataError(f"{where}: generated span {span} lies outside its {len(tokens)} tokens")
        for i in range(start, end):
            mask[i] = 1
    return mask


def heldout_question(question_id: str, fraction: float, salt: str = "") -> bool:
    """A stable split: the same question lands on the same side on every run and machine."""
    digest = hashlib.sha256(f"{salt}{question_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def write_dataset(
    sel: Selection, out_dir: Path, heldout: float, salt: str = "", max_len: int | None = None
) -> dict[str, Path]:
    """train.jsonl and heldout.jsonl, one row per sequence; duplicates (same ids, same mask) written once."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"train": out_dir / TRAIN_FILE, "heldout": out_dir / HELDOUT_FILE}
    seen: set[str] = set()
    questions: dict[str, set[str]] = {"train": set(), "heldout": set()}
    with open(paths["train"], "w", encoding="utf-8") as tr, open(paths["heldout"], "w", encoding="utf-8") as ho:
        for c in sel.kept:
            split = "heldout" if heldout_question(c.question_id, heldout, salt) else "train"
            for call, seq in enumerate(c.sequences):
                tokens = [int(t) for t in seq["tokens"]]
                mask = loss_mask(tokens, seq.get("action_ranges") or [], c.where)
                if not any(mask):
                    sel.dropped_sequences["no generated tokens"] += 1
                    continue
                if max_len is not None and len(tokens) > max_len:
                    sel.dropped_sequences[f"longer than max_len {max_len} (the trainer would cut it)"] += 1
                    continue
                digest = hashlib.sha256(json.dumps([tokens, mask]).encode()).hexdigest()
                if digest in seen:
                    sel.dropped_sequences["duplicate of a sequence already written"] += 1
                    continue
                seen.add(digest)
                row = {
                    "input_ids": tokens,
                    "loss_mask": mask,
                    "question_id": c.question_id,
                    "seed": c.seed,
                    "call": call,
                    "reward": c.reward,
                }
                (ho if split == "heldout" else tr).write(json.dumps(row) + "\n")
                sel.sequences[split] += 1
                sel.loss_tokens[split] += sum(mask)
                questions[split].add(c.question_id)
    sel.questions.update({k: len(v) for k, v in questions.items()})
    return paths


def teacher_card(files: list[Path]) -> list[dict]:
    """The model and tokenizer of each eval run (its metrics.json), so the dataset says whose ids it holds."""
    cards = []
    for f in files:
        try:
            card = json.loads((f.parent / "metrics.json").read_text())["card"]["model"]
        except (OSError, ValueError, KeyError, TypeError):
            card = None
        cards.append({"file": str(f), "model": card})
    return cards


def build(
    paths: list[str | Path],
    out_dir: str | Path,
    min_reward: float = 1.0,
    best_of: int | None = None,
    heldout: float = 0.1,
    salt: str = "",
    max_len: int | None = None,
    keep_truncated: bool = False,
) -> dict:
    """The whole command: read, select, write; returns (and writes as manifest.json) what was kept and dropped."""
    if not 0.0 <= heldout < 1.0:
        raise SFTDataError(f"--heldout {heldout}: a fraction of the questions, in [0, 1)")
    if best_of is not None and best_of < 1:
        raise SFTDataError(f"--best-of {best_of}: at least 1")
    files = trajectory_files(paths)
    problems: list[str] = []
    candidates = [c for f in files for c in read_candidates(f, problems)]
    sel = select(candidates, min_reward, best_of, keep_truncated)
    out = Path(out_dir)
    written = write_dataset(sel, out, heldout, salt, max_len)
    manifest = {
        **sel.summary(),
        "rows_unreadable": problems,
        "files": {k: str(v) for k, v in written.items()},
        "settings": {
            "min_reward": min_reward,
            "best_of": best_of,
            "heldout": heldout,
            "salt": salt,
            "max_len": max_len,
            "keep_truncated": keep_truncated,
        },
        "teachers": teacher_card(files),
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    return manifest


def render(manifest: dict) -> str:
    """The printed report: kept, dropped by reason, written by split."""
    lines = [f"trajectories: {manifest['trajectories_read']} read, {manifest['trajectories_kept']} kept"]
    for reason, n in sorted(manifest["trajectories_dropped"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  dropped {n}: {reason}")
    for split in ("train", "heldout"):
        lines.append(
            f"{split}: {manifest['sequences_written'].get(split, 0)} sequences from "
            f"{manifest['questions'].get(split, 0)} questions, {manifest['loss_tokens'].get(split, 0)} tokens in "
            f"the loss -> {manifest['files'][split]}"
        )
    for reason, n in sorted(manifest["sequences_dropped"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  sequences dropped {n}: {reason}")
    return "\n".join(lines)
