"""What an agent did on the decision task, per question kind: the behaviour RL is meant to move.

From an `asearcher eval` folder's `trajectories.jsonl` and the task's rows (`decision_task.py`: `id`, `kind`, `title`,
and for `read` rows `needs_page`), per kind (`all`, `read`, `both`, `none`): held-out F1, searches and page reads
per trajectory, valid actions (1 - invalid actions / turns), and the decisions each kind tests: on `read`, the share
of trajectories that opened a page among questions that need one and among those that do not; on `both`, the share
that searched at least twice. A `read` answer stated as a phrase, "WORD next", or an echo as "Echo WORD", is scored
on its rest, as the task's reward scores it (`decision_reward.stated_word`). Per-question F1 (the mean over its
seeds) with its article goes with it, for the interval resampled by article (`paired_stats.clustered_interval`).

Only scored rows count (`status` ok): a trajectory the infrastructure failed says nothing about the policy.

`python benchmarks/decision_behaviour.py EVAL_DIR TASK_ROWS` prints it as a table, one row per kind.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asearcher_plugin.rewards.reward import f1_score, parse_gold  # noqa: E402
from benchmarks.decision_reward import stated_word  # noqa: E402

KINDS = ("all", "read", "both", "none")


def load(eval_dir: Path, task_rows: Path) -> tuple[list[dict], dict[str, dict]]:
    rows = [json.loads(line) for line in (eval_dir / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    items = [json.loads(line) for line in task_rows.read_text().splitlines() if line.strip()]
    return rows, {item["id"]: item for item in items}


def per_trajectory(logs: list[dict]) -> dict[str, float]:
    """Searches and page reads per trajectory, and valid actions (1 - invalid actions / turns), over the `logs` of
    scored trajectories."""
    turns = sum(g["turns"] for g in logs) or 1
    return {
        "searches": statistics.mean(g["searches"] for g in logs),
        "page_reads": statistics.mean(g["accesses"] for g in logs),
        "valid_actions": 1 - sum(g["invalid_actions"] for g in logs) / turns,
    }


def task_f1(row: dict, item: dict) -> float:
    """The trajectory's F1 as the task scores it: a `read` answer's "WORD next" and an echo's "Echo WORD" count as
    their rest."""
    if item["kind"] not in ("read", "none") or not row.get("answer"):
        return row["scores"]["f1"]
    return f1_score(stated_word(item["question"], row["answer"]), parse_gold(item["golden_answers"]))


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarise(rows: list[dict], items: dict[str, dict]) -> dict[str, dict]:
    """Per kind, the behaviour above; a kind with no scored trajectory is left out."""
    scored = [r for r in rows if r.get("status") == "ok"]
    unknown = sorted({r["id"] for r in scored if r["id"] not in items})
    if unknown:
        raise ValueError(f"{len(unknown)} evaluated questions are not in the task's rows, e.g. {unknown[0]!r}")
    out = {}
    for kind in KINDS:
        mine = [r for r in scored if kind == "all" or items[r["id"]]["kind"] == kind]
        if not mine:
            continue
        per_question: dict[str, list[float]] = {}
        for r in mine:
            per_question.setdefault(r["id"], []).append(task_f1(r, items[r["id"]]))
        row = {
            "trajectories": len(mine),
            "f1": statistics.mean(f for scores in per_question.values() for f in scores),
            **per_trajectory([r["logs"] for r in mine]),
            "questions": {q: (statistics.mean(f), items[q]["title"]) for q, f in per_question.items()},
        }
        if kind == "read":
            needs = [r["logs"]["accesses"] > 0 for r in mine if items[r["id"]].get("needs_page")]
            shown = [r["logs"]["accesses"] > 0 for r in mine if not items[r["id"]].get("needs_page")]
            row["reads_when_needed"], row["reads_when_not"] = _share(needs), _share(shown)
        if kind == "both":
            row["second_search"] = _share([r["logs"]["searches"] >= 2 for r in mine])
        out[kind] = row
    return out


def table(summary: dict[str, dict]) -> str:
    """One row per kind: trajectories, F1, searches and page reads per trajectory, the kinds' decisions, valid
    actions."""

    def cell(value) -> str:
        return "" if value is None else f"{value:.2f}"

    lines = ["| kind | trajectories | F1 | searches | page reads | pages read: needed / not | second search | valid "
             "actions |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind, row in summary.items():
        reads = f"{cell(row['reads_when_needed'])} / {cell(row['reads_when_not'])}" if kind == "read" else ""
        lines.append(
            f"| {kind} | {row['trajectories']} | {row['f1']:.3f} | {row['searches']:.2f} | {row['page_reads']:.2f} | "
            f"{reads} | {cell(row.get('second_search'))} | {row['valid_actions']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_dir", type=Path, help="an `asearcher eval` folder")
    ap.add_argument("task_rows", type=Path, help="the decision task's rows it was run on (decision_task.py)")
    args = ap.parse_args()
    print(table(summarise(*load(args.eval_dir, args.task_rows))))


if __name__ == "__main__":
    main()
