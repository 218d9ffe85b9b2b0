"""The synthesis item: one seed's result, built by `item.py`, written and read back by `output.py` and `stats.py`.

It crosses Ray process boundaries as is and is one line of `items.jsonl` as `to_json()`; `from_json()` reads
that line back, including lines written before these classes existed (same keys, some missing).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from .steps import QA

_QA_FIELDS = {f.name for f in fields(QA)}


def _drop_none(row: dict) -> dict:
    return {k: v for k, v in row.items() if v is not None}


@dataclass
class Round:
    """One validated step: the seed (round 0), an injection or a fuzz."""

    round: int
    action: str  # seed | inject | fuzz
    status: str  # accepted | rejected | dropped (no candidate came out of the step)
    reason: str = ""
    question: str | None = None  # the candidate, when one was generated
    verdicts: dict | None = None  # validate.py's verdicts: quality, difficulty, uniqueness, passed, reason
    detail: str | None = None

    def passed(self, check: str) -> bool:
        return bool((self.verdicts or {}).get(check, {}).get("passed"))

    @property
    def solve_rate(self) -> float | None:
        return (self.verdicts or {}).get("difficulty", {}).get("solve_rate")

    def to_json(self) -> dict:
        return _drop_none(asdict(self))

    @classmethod
    def from_json(cls, row: dict) -> Round:
        return cls(**{k: v for k, v in row.items() if k in cls.__dataclass_fields__})


@dataclass
class Variant:
    """A question hard enough to emit, with the round that made it and its tool-free solve rate."""

    qa: QA
    round: int
    solve_rate: float
    duplicate_of: str | None = None  # set by the writer when a near-duplicate was emitted before

    def to_json(self) -> dict:
        return _drop_none(
            {**asdict(self.qa), "round": self.round, "solve_rate": self.solve_rate, "duplicate_of": self.duplicate_of}
        )

    @classmethod
    def from_json(cls, row: dict) -> Variant:
        return cls(
            QA(**{k: v for k, v in row.items() if k in _QA_FIELDS}),
            row["round"],
            row["solve_rate"],
            row.get("duplicate_of"),
        )


@dataclass
class SynthItem:
    seed_id: str
    source: str = "seed"  # seed (a question given) | page (a question drawn from a page)
    status: str = ""  # done | dropped | failed (endpoint or tools unreachable: tried again on resume)
    reason: str = ""
    detail: str | None = None
    seed: dict | None = None  # the validated seed question and answer
    rounds: list[Round] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=list)
    usage: dict = field(default_factory=dict)  # tokens per endpoint and stage
    seconds: float = 0.0
    emitted: int | None = None  # training rows written, once the writer has seen it

    @property
    def finished(self) -> bool:
        return self.status != "failed"

    def to_json(self) -> dict:
        return _drop_none(
            {
                **asdict(self),
                "rounds": [r.to_json() for r in self.rounds],
                "variants": [v.to_json() for v in self.variants],
            }
        )

    @classmethod
    def from_json(cls, row: dict) -> SynthItem:
        simple = {k: v for k, v in row.items() if k in cls.__dataclass_fields__ and k not in ("rounds", "variants")}
        return cls(
            **simple,
            rounds=[Round.from_json(r) for r in row.get("rounds", [])],
            variants=[Variant.from_json(v) for v in row.get("variants", [])],
        )
