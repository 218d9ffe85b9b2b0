"""`asearcher eval compare A B`: two runs side by side, per dataset and metric, over the questions both answered.

A difference of means over the questions two runs share is paired: the same question is easy or hard for
both, so the interval resamples questions and takes each one's difference (B - A) with it (a paired
bootstrap), which is narrower and fairer than comparing two independent intervals. Each run's value for a
question is its Avg@k there: the mean of its first k seeds, k being the run's own. Whether the runs were
made alike is read from their eval cards, field by field.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from .card import differences
from .runner import load_rows

ITERS = 2000


class CompareError(ValueError):
    pass


def _load(run: Path) -> tuple[dict, dict[tuple[str, str], dict[str, float]]]:
    """A run's metrics.json and, per (dataset, id), each metric's mean over the first k seeds."""
    path = run / "metrics.json"
    if not path.is_file():
        raise CompareError(f"{run}: no metrics.json (not an `asearcher eval` output folder?)")
    try:
        metrics = json.loads(path.read_text())
        k = int(metrics["k"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CompareError(f"{path}: not a metrics file ({type(exc).__name__}: {exc})") from None
    seeds: dict[tuple[str, str], list] = {}
    for row in load_rows(run):
        if row.status == "ok":
            seeds.setdefault((row.dataset, row.id), []).append(row)
    per_q = {}
    for key, rows in seeds.items():
        first = sorted(rows, key=lambda r: r.seed)[:k]
        names = {m for r in first for m in r.scores}
        per_q[key] = {m: float(np.mean([r.scores.get(m, 0.0) for r in first])) for m in names}
    return metrics, per_q


def paired_bootstrap(a: list[float], b: list[float], iters: int = ITERS, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of mean(b - a), resampling the paired questions with replacement."""
    diff = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if len(diff) == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(iters, len(diff)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def compare_runs(a: Path, b: Path, iters: int = ITERS, seed: int = 0) -> dict:
    metrics_a, qa = _load(Path(a))
    metrics_b, qb = _load(Path(b))
    datasets = sorted({d for d, _ in qa} | {d for d, _ in qb})
    rows = []
    for dataset in [*datasets, "overall"]:
        keys_a = {q for q in qa if dataset in ("overall", q[0])}
        keys_b = {q for q in qb if dataset in ("overall", q[0])}
        shared = sorted(keys_a & keys_b)
        names = sorted({m for q in shared for m in qa[q]} & {m for q in shared for m in qb[q]})
        for metric in names:
            va = [qa[q].get(metric, 0.0) for q in shared]
            vb = [qb[q].get(metric, 0.0) for q in shared]
            low, high = paired_bootstrap(va, vb, iters, seed)
            rows.append(
                {
                    "dataset": dataset,
                    "metric": metric,
                    "shared_questions": len(shared),
                    "only_a": len(keys_a - keys_b),
                    "only_b": len(keys_b - keys_a),
                    "a": float(np.mean(va)),
                    "b": float(np.mean(vb)),
                    "difference": float(np.mean(vb) - np.mean(va)),
                    "ci95": [low, high],
                    "significant": low > 0 or high < 0,
                }
            )
    card_a, card_b = metrics_a.get("card"), metrics_b.get("card")
    return {
        "a": str(a),
        "b": str(b),
        "k": [metrics_a["k"], metrics_b["k"]],
        "rows": rows,
        "cards": {"a": card_a is not None, "b": card_b is not None},
        "card_differences": [list(d) for d in differences(card_a, card_b)] if card_a and card_b else None,
    }


def _cards_text(result: dict) -> list[str]:
    diffs = result["card_differences"]
    if diffs is None:
        missing = " and ".join(x.upper() for x in ("a", "b") if not result["cards"][x])
        return [f"Run {missing} has no eval card (made by an older version): whether the settings match is unknown."]
    if not diffs:
        return ["The two eval cards are identical: the runs were made with the same settings."]
    return [f"The eval cards differ in {len(diffs)} field(s):"]


def render_markdown(result: dict) -> str:
    lines = [
        "# Evaluation comparison",
        "",
        f"A: `{result['a']}` (k = {result['k'][0]}); B: `{result['b']}` (k = {result['k'][1]}). Values are Avg@k over "
        "the questions both runs scored; the interval is a paired bootstrap 95% interval of B - A.",
        "",
        "| dataset | metric | shared questions | A | B | B - A | 95% CI | interval excludes 0 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lo, hi = r["ci95"]
        lines.append(
            f"| {r['dataset']} | {r['metric']} | {r['shared_questions']} | {r['a']:.3f} | {r['b']:.3f} | "
            f"{r['difference']:+.3f} | {lo:+.3f} to {hi:+.3f} | {'yes' if r['significant'] else 'no'} |"
        )
    only = [r for r in result["rows"] if r["dataset"] == "overall"][:1]
    if only and (only[0]["only_a"] or only[0]["only_b"]):
        lines += ["", f"Left out: {only[0]['only_a']} question(s) only A scored, {only[0]['only_b']} only B scored."]
    lines += ["", "## Eval cards", "", *_cards_text(result)]
    if result["card_differences"]:
        lines += ["", "| field | A | B |", "|---|---|---|"]
        lines += [f"| {f} | {_cell(x)} | {_cell(y)} |" for f, x, y in result["card_differences"]]
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text.replace("|", "\\|").replace("\n", " ")


def render_html(result: dict) -> str:
    e = html.escape
    body = "\n".join(
        f"<tr><td>{e(r['dataset'])}</td><td>{e(r['metric'])}</td><td>{r['shared_questions']}</td>"
        f"<td>{r['a']:.3f}</td><td>{r['b']:.3f}</td><td><b>{r['difference']:+.3f}</b></td>"
        f"<td>{r['ci95'][0]:+.3f} to {r['ci95'][1]:+.3f}</td><td>{'yes' if r['significant'] else 'no'}</td></tr>"
        for r in result["rows"]
    )
    diffs = result["card_differences"] or []
    card = "\n".join(
        f"<tr><td><code>{e(f)}</code></td><td>{e(_cell(x))}</td><td>{e(_cell(y))}</td></tr>" for f, x, y in diffs
    )
    card_table = (
        f'<table id="card-differences"><tr><th>field</th><th>A</th><th>B</th></tr>\n{card}</table>' if diffs else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>asearcher evaluation comparison</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; }}
#card-differences td {{ font-size: 0.9em; word-break: break-all; }}
</style></head><body>
<h1>Evaluation comparison</h1>
<p>A: <code>{e(result["a"])}</code> (k = {result["k"][0]}); B: <code>{e(result["b"])}</code> (k = {result["k"][1]}).
Values are Avg@k over the questions both runs scored; the interval is a paired bootstrap 95% interval of B - A.</p>
<table id="comparison"><tr><th>dataset</th><th>metric</th><th>shared questions</th><th>A</th><th>B</th><th>B - A</th>
<th>95% CI</th><th>interval excludes 0</th></tr>
{body}</table>
<h2>Eval cards</h2>
<p id="card-verdict">{e(" ".join(_cards_text(result)))}</p>
{card_table}
</body></html>
"""


def write_comparison(a: Path, b: Path, out: Path) -> dict:
    result = compare_runs(a, b)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    (out / "compare.md").write_text(render_markdown(result))
    (out / "compare.html").write_text(render_html(result), encoding="utf-8")
    return result
