"""Statistics of a run, recomputed from `items.jsonl` (so they are right after any resume):
`stats.json` and a short `report.md`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from .output import TRAIN, latest_items, read_jsonl
from .records import SynthItem

STAGE_COLUMNS = ("attempted", "generated", "quality passed", "unique", "accepted", "hard enough")


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 3) if values else 0.0


def _stage_counts(items: list[SynthItem], max_solve_rate: float) -> tuple[dict, Counter]:
    """Per step kind, how many candidates got through each check; and why the others did not."""
    reasons: Counter = Counter()
    stages = {a: Counter() for a in ("seed", "inject", "fuzz")}
    for item in items:
        if item.status != "done" and item.reason:
            reasons[item.reason] += 1
        for rnd in item.rounds:
            s = stages[rnd.action]
            s["attempted"] += 1
            if rnd.status == "dropped":
                reasons[rnd.reason] += 1
                continue
            s["generated"] += 1
            if rnd.passed("quality"):
                s["quality passed"] += 1
                if rnd.passed("uniqueness"):
                    s["unique"] += 1
            if rnd.status == "rejected":
                reasons[f"{rnd.action}: {rnd.reason}"] += 1
            if rnd.status == "accepted":
                s["accepted"] += 1
                if rnd.solve_rate <= max_solve_rate:
                    s["hard enough"] += 1
    return {k: {key: v[key] for key in STAGE_COLUMNS} for k, v in stages.items()}, reasons


def _tokens(items: list[SynthItem], emitted: int) -> dict:
    by_stage: dict[str, Counter] = {}
    for item in items:
        for key, u in item.usage.items():
            by_stage.setdefault(key, Counter()).update(u)
    total = Counter()
    for t in by_stage.values():
        total.update(t)
    per_emitted = round((total["prompt_tokens"] + total["completion_tokens"]) / emitted) if emitted else None
    return {
        "total": dict(total),
        "per_emitted": per_emitted,
        "by_stage": {k: dict(v) for k, v in sorted(by_stage.items())},
    }


def compute_stats(out_dir: Path, max_solve_rate: float) -> dict:
    items = list(latest_items(out_dir).values())
    train = read_jsonl(out_dir / TRAIN)
    status = Counter(i.status for i in items)
    stages, reasons = _stage_counts(items, max_solve_rate)
    prov = [r["provenance"] for r in train]
    accepted = [[rnd for rnd in i.rounds if rnd.status == "accepted"] for i in items if i.finished]
    return {
        "seeds": {"finished": sum(v for k, v in status.items() if k != "failed"), **dict(status)},
        "emitted": len(train),
        "duplicates": sum(1 for i in items for v in i.variants if v.duplicate_of),
        "stages": stages,
        "drop_reasons": dict(reasons.most_common()),
        "per_emitted": {
            "injections": _mean([p["injections"] for p in prov]),
            "fuzzes": _mean([p["fuzzes"] for p in prov]),
            "solve_rate": _mean([p["solve_rate"] for p in prov]),
        },
        "per_seed": {
            "accepted_injections": _mean([sum(r.action == "inject" for r in a) for a in accepted]),
            "accepted_fuzzes": _mean([sum(r.action == "fuzz" for r in a) for a in accepted]),
        },
        "tokens": _tokens(items, len(train)),
        "seconds": round(sum(i.seconds for i in items), 1),
    }


def render_report(stats: dict) -> str:
    s = stats["seeds"]
    lines = [
        "# Synthesis report",
        "",
        f"Seeds finished: {s['finished']} (done {s.get('done', 0)}, dropped {s.get('dropped', 0)}); "
        f"failed, to retry: {s.get('failed', 0)}. Questions emitted: **{stats['emitted']}** "
        f"(near-duplicates removed: {stats['duplicates']}).",
        "",
        "| stage | attempted | generated | quality passed | unique | accepted | hard enough |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, st in stats["stages"].items():
        lines.append(f"| {name} | " + " | ".join(str(st[k]) for k in STAGE_COLUMNS) + " |")
    pe, ps = stats["per_emitted"], stats["per_seed"]
    lines += [
        "",
        f"Per emitted question: {pe['injections']} injections, {pe['fuzzes']} fuzzes, tool-free solve rate "
        f"{pe['solve_rate']}. Accepted per seed: {ps['accepted_injections']} injections, "
        f"{ps['accepted_fuzzes']} fuzzes.",
        "",
        "| drop reason | count |",
        "|---|---|",
    ]
    lines += [f"| {r} | {n} |" for r, n in stats["drop_reasons"].items()] or ["| (none) | 0 |"]
    t = stats["tokens"]
    lines += ["", "| tokens (endpoint/stage) | calls | prompt | completion |", "|---|---|---|---|"]
    lines += [
        f"| {k} | {v.get('calls', 0)} | {v.get('prompt_tokens', 0)} | {v.get('completion_tokens', 0)} |"
        for k, v in t["by_stage"].items()
    ]
    lines += [
        "",
        f"Tokens per emitted question: {t['per_emitted']}."
        + (
            " Some servers reported no usage; those calls are estimated at 4 characters per token."
            if t["total"].get("estimated")
            else ""
        ),
        "",
    ]
    return "\n".join(lines)


def write_stats(out_dir: Path, max_solve_rate: float) -> dict:
    stats = compute_stats(out_dir, max_solve_rate)
    (out_dir / "stats.json").write_text(json.dumps(stats, indent=2))
    (out_dir / "report.md").write_text(render_report(stats))
    return stats
