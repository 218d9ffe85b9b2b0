"""The trajectory record passed between the environment, the eval runner, the rollout and the scheduler.

Modelled on verl's `AgentLoopOutput`: typed fields instead of a dict read by string, with per-metric
`scores` kept apart from the counters in `stats`, so a counter (tool errors, a failed judge) can never be
mistaken for a metric. OpenRLHF's agent contract wants one flat dict per trajectory; `to_openrlhf()` is the
only place that dict is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Counters logged after the `score_*` keys, as they always were: OpenRLHF logs extra_logs in dict order.
_AFTER_SCORES = ("judge_failed", "llm_calls", "tokens_processed")


def flat_logs(stats: dict[str, float], scores: dict[str, float]) -> dict[str, float]:
    """OpenRLHF's `extra_logs`: counters and one `score_<metric>` per metric, all flat numbers."""
    return {
        **{k: v for k, v in stats.items() if k not in _AFTER_SCORES},
        **{f"score_{k}": float(v) for k, v in scores.items()},
        **{k: stats[k] for k in _AFTER_SCORES if k in stats},
    }


@dataclass
class Trajectory:
    """One finished trajectory.

    `observation_tokens` is the whole token sequence (prompt, model turns, tool output); `action_ranges`
    are the spans the model generated, `rollout_log_probs` one per token (0 outside those spans). The
    agent that rebuilds its prompt each call has no single sequence: those three are None.
    """

    prompt: Any
    label: Any
    reward: float
    scores: dict[str, float]  # one value per metric (em, f1, ..., judge): what eval reports as metrics
    stats: dict[str, float]  # counters (turns, searches, tool_errors, judge_failed, ...): never metrics
    truncated: bool = False
    answer: str | None = None
    text: str = ""
    observation_tokens: list[int] | None = None
    action_ranges: list[tuple[int, int]] | None = None
    rollout_log_probs: list[float] | None = None
    token_times: list | None = None  # wall clock of the first and the last model call: [start, end]
    turn_times: list[float] | None = None  # wall clock when each model call began, one per action range
    # agent.training_sequences per_call: OpenRLHF's per-sequence fields (observation_tokens, action_ranges,
    # rollout_log_probs, token_times, turn_times) of each sequence, in call order
    sequences: list[dict] | None = None
    # evaluation's record of the same per-call fields (for `asearcher sft-data`): never trained on, never sent to
    # OpenRLHF, so the whole trajectory stays what training and OpenRLHF read
    calls: list[dict] | None = None
    images: Any = None
    mm_train_inputs: Any = None

    @property
    def gen_tokens(self) -> int:
        return sum(b - a for a, b in self.action_ranges or [])

    @property
    def tokens(self) -> int:
        return len(self.observation_tokens or [])

    def extra_logs(self) -> dict[str, float]:
        return {**flat_logs(self.stats, self.scores), "truncated": float(self.truncated)}

    def to_openrlhf(self) -> dict:
        """The dict OpenRLHF 0.11.2's `_process_response_into_experience` reads (`scores` there is the
        reward, as in its own executors). `answer`, `text`, `token_times` and `turn_times` ride along for our
        scheduler.

        With per-call `sequences`, each sequence carries its own tokens, spans, log-probs and times, and the
        trainer reads only those: the whole trajectory's (`observation_tokens`, `action_ranges`,
        `rollout_log_probs`, `text`, `token_times`, `turn_times`) are left out (None, the keys stay), since at a
        hundred turns they would be most of the bytes through Ray's queue, once more beside the sequences."""
        whole = self.sequences is None
        return {
            "prompt": self.prompt,
            "label": self.label,
            "images": self.images,
            "mm_train_inputs": self.mm_train_inputs,
            "observation_tokens": self.observation_tokens if whole else None,
            "action_ranges": self.action_ranges if whole else None,
            "rollout_log_probs": self.rollout_log_probs if whole else None,
            "reward": self.reward,
            "scores": self.reward,
            "truncated": self.truncated,
            "extra_logs": self.extra_logs(),
            "answer": self.answer,
            "text": self.text if whole else None,
            "token_times": self.token_times if whole else None,
            "turn_times": self.turn_times if whole else None,
            "sequences": self.sequences,
        }


def token_sequences(trajectory: Trajectory) -> list[dict] | None:
    """The trajectory's training sequences as written to trajectories.jsonl: `{"tokens", "action_ranges"}` each,
    the per-call sequences when the calls were recorded, else its one sequence; None when it has neither."""
    pieces = (
        trajectory.sequences
        or trajectory.calls
        or (
            [{"observation_tokens": trajectory.observation_tokens, "action_ranges": trajectory.action_ranges or []}]
            if trajectory.observation_tokens is not None
            else []
        )
    )
    rows = [
        {"tokens": list(p["observation_tokens"]), "action_ranges": [list(r) for r in p["action_ranges"]]}
        for p in pieces
    ]
    return rows or None


@dataclass
class EvalRow:
    """One (dataset, question, seed) of `asearcher eval`: a line of `trajectories.jsonl`.

    `status` is "ok" (scored), "failed" (infrastructure: engine or tools unreachable) or "error" (the item
    failed on its own); only "ok" rows carry a trajectory. `scores` feeds the metrics, `logs` the counters
    shown beside them.
    """

    dataset: str
    id: str
    seed: int
    question: str
    golden_answers: list
    status: str = "ok"
    answer: str | None = None
    reward: float | None = None
    text: str = ""
    truncated: bool = False
    logs: dict[str, float] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    gen_tokens: int | None = None  # None on rows of versions that did not count it
    error: str = ""
    seconds: float = 0.0
    # Each training sequence the calls made, as the engine saw and produced it: {"tokens": ids, "action_ranges":
    # [[start, end], ...]} (the generated spans). What `asearcher sft-data` trains on; None on older rows.
    sequences: list[dict] | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        # FlashRAG files all number their questions `test_0`, `test_1`, ...: ids are unique only within a dataset.
        return self.dataset, self.id, self.seed

    def record(self, trajectory: Trajectory) -> None:
        self.status, self.answer, self.reward, self.text = "ok", trajectory.answer, trajectory.reward, trajectory.text
        self.truncated, self.scores = trajectory.truncated, dict(trajectory.scores)
        self.logs = {**trajectory.stats, "truncated": float(trajectory.truncated)}
        self.tokens, self.gen_tokens = trajectory.tokens, trajectory.gen_tokens
        self.sequences = token_sequences(trajectory)

    def to_json(self) -> dict:
        row = {
            "id": self.id,
            "dataset": self.dataset,
            "seed": self.seed,
            "question": self.question,
            "golden_answers": self.golden_answers,
            "status": self.status,
        }
        if self.status == "ok":
            row.update(
                answer=self.answer,
                reward=self.reward,
                text=self.text,
                truncated=self.truncated,
                logs=self.logs,
                scores=self.scores,
                tokens=self.tokens,
                gen_tokens=self.gen_tokens,
            )
            if self.sequences is not None:
                row["sequences"] = self.sequences
        else:
            row["error"] = self.error
        row["seconds"] = self.seconds
        return row

    @classmethod
    def from_json(cls, row: dict) -> EvalRow:
        """Also reads rows written before `logs` and `scores` were kept apart, where `logs` held OpenRLHF's flat
        extra_logs (`score_<metric>` beside the counters) and `scores` may be missing.

        Raises RowError naming the first field of the wrong type: a line from a file someone else wrote reaches
        reports and pages, which must never get markup where a number or a metric name belongs."""
        _check_row(row)
        logs = dict(row.get("logs") or {})
        packed = {k: logs.pop(k) for k in list(logs) if k.startswith("score_")}
        scores = row.get("scores")
        if scores is None:
            scores = {k.removeprefix("score_"): v for k, v in packed.items()}
        names = set(cls.__dataclass_fields__) - {"logs", "scores"}
        return cls(**{k: v for k, v in row.items() if k in names}, logs=logs, scores=dict(scores))


class RowError(TypeError):
    """A `trajectories.jsonl` line whose field has the wrong type; the message names the field."""


_NUMBER = (int, float)
_NAME = re.compile(r"[A-Za-z0-9_.@:-]{1,64}")  # a metric or counter name
_ROW_TYPES = {
    "dataset": (str,),
    "id": (str,),
    "seed": (int,),
    "question": (str,),
    "status": (str,),
    "answer": (str, type(None)),
    "reward": (*_NUMBER, type(None)),
    "text": (str,),
    "truncated": (bool,),
    "tokens": (int,),
    "gen_tokens": (int, type(None)),
    "error": (str,),
    "seconds": _NUMBER,
    "sequences": (list, type(None)),
}
STATUSES = ("ok", "failed", "error")


def _check_row(row) -> None:
    if not isinstance(row, dict):
        raise RowError(f"a trajectory line is a JSON object, not {type(row).__name__}")
    for name in ("dataset", "id", "seed", "question"):
        if name not in row:
            raise RowError(f"field {name!r} is missing")
    for name, types in _ROW_TYPES.items():
        value = row.get(name)
        if name in row and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise RowError(f"field {name!r} must be {wanted}, not {type(value).__name__}: {str(value)[:60]!r}")
    if "status" in row and row["status"] not in STATUSES:
        raise RowError(f"field 'status' must be one of {', '.join(STATUSES)}, not {str(row['status'])[:60]!r}")
    golds = row.get("golden_answers", [])
    if not isinstance(golds, list) or not all(isinstance(g, str) for g in golds):
        raise RowError("field 'golden_answers' must be a list of strings")
    for name in ("logs", "scores"):
        table = row.get(name) or {}
        if not isinstance(table, dict):
            raise RowError(f"field {name!r} must be an object of numbers, not {type(table).__name__}")
        for key, value in table.items():
            if not isinstance(value, _NUMBER) or not _NAME.fullmatch(key):
                raise RowError(
                    f"field {name!r}: entry {key[:40]!r} must be a name of letters, digits and _.@:- with a number, "
                    f"not {type(value).__name__}"
                )
