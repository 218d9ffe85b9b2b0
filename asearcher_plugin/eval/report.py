"""`summary.md` and a self-contained `report.html`: metrics table, plots, and a trajectory viewer.

The HTML embeds its plots as PNG data URLs and needs no script or network: one file to open or send.
"""

from __future__ import annotations

import base64
import html
import io
import re

from ..agent.text_turns import turn_spans
from ..records import EvalRow
from ..rewards.reward import AGREE_NOTE, METRIC_NOTES
from .card import banner, card_rows

HEADLINE = ("f1", "em", "cover_em", "substring", "judge")


def _metric_rows(metrics: dict):
    k = metrics["k"]
    for dataset, entry in metrics["datasets"].items():
        for name in HEADLINE + tuple(sorted(set(entry) - set(HEADLINE) - {"distributions"})):
            if name in entry:
                m = entry[name]
                yield (
                    dataset,
                    name,
                    m["questions"],
                    m[f"avg@{k}"],
                    m[f"avg@{k}_ci95"],
                    m[f"pass@{k}"],
                    m[f"pass@{k}_ci95"],
                )


def _counts(metrics: dict) -> str:
    return (
        f"{metrics['items_ok']} items scored, {metrics['items_failed']} failed for infrastructure reasons, "
        f"{metrics.get('items_error', 0)} failed on their own (neither scored)"
    )


def render_markdown(metrics: dict) -> str:
    k = metrics["k"]
    warning = banner(metrics.get("card"))
    lines = [
        f"# Evaluation summary (k = {k})",
        "",
        *([f"> **{warning}**", ""] if warning else []),
        _counts(metrics) + ".",
        "",
        f"| dataset | metric | questions | Avg@{k} | 95% CI | Pass@{k} | 95% CI |",
        "|---|---|---|---|---|---|---|",
    ]
    for d, name, n, avg, avg_ci, pas, pas_ci in _metric_rows(metrics):
        lines.append(
            f"| {_md_cell(d)} | {name} | {n} | {avg:.3f} | {avg_ci[0]:.3f}-{avg_ci[1]:.3f} | {pas:.3f} | {pas_ci[0]:.3f}-{pas_ci[1]:.3f} |"
        )
    overall = metrics["datasets"].get("overall", {}).get("distributions", {})
    if overall:
        lines += ["", "| per trajectory | mean | p50 | p90 | max |", "|---|---|---|---|---|"]
        for key, d in overall.items():
            if d:
                lines.append(f"| {key} | {d['mean']:.2f} | {d['p50']:.0f} | {d['p90']:.0f} | {d['max']:.0f} |")
    if metrics.get("card"):
        lines += ["", "## Eval card", "", "| field | value |", "|---|---|"]
        lines += [f"| {_md_cell(field)} | {_md_cell(value)} |" for field, value in card_rows(metrics["card"])]
    return "\n".join(lines) + "\n"


_MD_SPECIAL = re.compile(r"([\\`*\[\]()!|~])")


def _md_cell(value: str) -> str:
    """Text for a Markdown table cell, shown as written: dataset names and card values come from files anyone wrote,
    so no link, image, emphasis, HTML tag or cell break of theirs is rendered."""
    text = " ".join(str(value).split())  # newlines end a table row
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _card_html(card: dict | None) -> str:
    if not card:
        return ""
    rows = "\n".join(
        f"<tr><td><code>{html.escape(field)}</code></td><td>{html.escape(value)}</td></tr>"
        for field, value in card_rows(card)
    )
    return f'<h2>Eval card</h2>\n<table id="card"><tr><th>field</th><th>value</th></tr>\n{rows}</table>'


def _banner_html(card: dict | None) -> str:
    warning = banner(card)
    return f'<p id="banner" class="banner">{html.escape(warning)}</p>' if warning else ""


def _plot(rows: list[EvalRow]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.status == "ok"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    axes[0].hist([r.scores.get("f1", 0.0) for r in ok], bins=10, range=(0, 1), color="#4c72b0")
    axes[0].set_title("F1 per trajectory", fontsize=10)
    axes[1].hist([r.logs.get("turns", 0) for r in ok], bins=20, color="#dd8452")
    axes[1].set_title("turns per trajectory", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _turns_html(text: str, question: str) -> str:
    """The prompt, then each model turn and the agent's feedback after it: an `<information>` the prompt or the model
    wrote stays in its own box, not drawn as tool output."""
    cut, spans = turn_spans(text or "", question)
    pieces = [("prompt", text[:cut])]
    for start, feedback, end in spans:
        pieces += [("model", text[start:feedback]), ("tool", text[feedback:end])]
    return "\n".join(f'<pre class="{cls}">{html.escape(piece)}</pre>' for cls, piece in pieces if piece.strip())


def _metric_legend() -> str:
    return "; ".join(f"{name}: {note}" for name, note in METRIC_NOTES.items()) + ". " + AGREE_NOTE


def _esc(value) -> str:
    """Every value from a trajectories file or its metrics, whatever its type, goes into the page as text."""
    return html.escape(str(value))


def example(rows: list[EvalRow]) -> EvalRow | None:
    """The trajectory the report opens near its top: the best score, then the most tool use, then the first."""
    ok = [r for r in rows if r.status == "ok"]
    if not ok:
        return None
    return max(
        sorted(ok, key=lambda r: r.key),
        key=lambda r: (r.scores.get("f1", 0.0), r.logs.get("searches", 0) + r.logs.get("accesses", 0)),
    )


def _trajectory_html(r: EvalRow, opened: bool = False) -> str:
    e, s, logs = _esc, r.scores, r.logs
    return (
        f'<details class="traj"{" open" if opened else ""}><summary><b>{e(r.dataset)}/{e(r.id)}</b> seed {e(r.seed)} - '
        f"F1 {s.get('f1', 0):.2f}, EM {s.get('em', 0):.0f} - {int(logs.get('turns', 0))} turns, "
        f"{int(logs.get('searches', 0))} searches, {int(logs.get('accesses', 0))} pages - {e(r.question)}</summary>"
        f"<p><b>gold:</b> {e(' | '.join(map(str, r.golden_answers)))} &nbsp; <b>answer:</b> "
        f"{e(r.answer)}</p>{_turns_html(r.text, r.question)}</details>"
    )


def render_html(metrics: dict, rows: list[EvalRow]) -> str:
    k = metrics["k"]
    e = _esc
    table = "\n".join(
        f"<tr><td>{e(d)}</td><td>{e(n_)}</td><td>{e(q)}</td><td>{a:.3f} <small>({ac[0]:.3f}-{ac[1]:.3f})</small></td>"
        f"<td>{p:.3f} <small>({pc[0]:.3f}-{pc[1]:.3f})</small></td></tr>"
        for d, n_, q, a, ac, p, pc in _metric_rows(metrics)
    )
    items = []
    for r in sorted(rows, key=lambda r: r.key):
        if r.status != "ok":
            cls, what = ("failed", "FAILED") if r.status == "failed" else ("error", "ERROR")
            items.append(
                f'<details class="{cls}"><summary>{e(r.dataset)}/{e(r.id)} seed {e(r.seed)}: '
                f"{what} ({e(r.error)})</summary></details>"
            )
            continue
        items.append(_trajectory_html(r))
    shown = example(rows)
    example_html = (
        "<h2>An example trajectory</h2>"
        '<p class="note">The best-scored trajectory, then the one with the most searches and pages read; every '
        'trajectory is <a href="#trajectories">below</a>.</p>'
        f'<div id="example">{_trajectory_html(shown, opened=True)}</div>'
        if shown
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>asearcher evaluation report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; }}
pre {{ white-space: pre-wrap; padding: 6px; margin: 4px 0; }} pre.model {{ background: #eef4ff; }}
pre.prompt {{ background: #fafafa; color: #555; max-height: 12em; overflow: auto; }}
pre.tool {{ background: #f4f4f4; color: #333; max-height: 18em; overflow: auto; }}
.banner {{ background: #fff3cd; border: 2px solid #d39e00; padding: 10px 14px; font-weight: bold; }}
#card td {{ font-size: 0.9em; word-break: break-all; }} .note {{ color: #555; font-size: 0.9em; }}
details {{ border-bottom: 1px solid #ddd; padding: 4px 0; }} details.failed summary, details.error summary {{ color: #b00; }}
</style></head><body>
{_banner_html(metrics.get("card"))}
<h1>Evaluation report</h1>
<p>{e(_counts(metrics))}; k = {e(k)}.</p>
<table id="metrics"><tr><th>dataset</th><th>metric</th><th>questions</th><th>Avg@{e(k)} (95% CI)</th><th>Pass@{e(k)} (95% CI)</th></tr>
{table}</table>
<p class="note">{e(_metric_legend())}</p>
{example_html}
{_card_html(metrics.get("card"))}
<h2>Distributions</h2><img alt="score and turn distributions" src="{_plot(rows)}">
<h2 id="trajectories">Trajectories</h2>
<div>
{"".join(items)}
</div></body></html>
"""
