"""`asearcher eval`: every (question, seed) through the agent, resumable, then metrics and reports.

Each finished item is appended to `trajectories.jsonl` at once, so a crash loses only the items in
flight and a re-run skips every (dataset, id, seed) already done. An item that fails for infrastructure
reasons (engine or tools unreachable after their retries) is recorded with status `failed` and
left out of the metrics, never scored as wrong; a re-run tries it again. An item that fails on its
own (the model server refuses its prompt, a bug met by that question alone) is recorded with status
`error` and its reason, counted apart from both, and the run goes on; a re-run tries it again too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from tqdm import tqdm

from ..agent.executor import AgentExecutor
from ..engines.openai import EngineUnavailable
from ..engines.types import SamplingParams
from ..records import EvalRow
from ..settings.config import AgentConfig
from ..utils.jsonl import drop_cut_tail
from .metrics import asearcher_aggregate, compute_metrics

log = logging.getLogger(__name__)
INFRA_ERRORS = (EngineUnavailable, ConnectionError, TimeoutError, OSError)


def _read_rows(path: Path) -> list[EvalRow]:
    rows = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rows.append(EvalRow.from_json(json.loads(line)))
            except (json.JSONDecodeError, TypeError, AttributeError):
                continue  # a line cut by a crash
    return rows


def _done(path: Path) -> set[tuple[str, str, int]]:
    return {row.key for row in _read_rows(path) if row.status == "ok"}


async def run_eval(
    items: list[dict],
    config: AgentConfig,
    engine,
    tokenizer,
    out_dir: Path,
    k: int = 1,
    concurrency: int = 8,
    max_length: int = 8192,
    temperature: float = 0.6,
    top_p: float = 0.95,
    progress: bool = True,
    sources: dict[str, tuple[Path, bool]] | None = None,
    limit: int | None = None,
    question_key: str | None = None,
    answer_key: str | None = None,
    other_settings: bool = False,
) -> Path:
    """`sources`, `limit` and the keys only describe how `items` were read, for the eval card. A folder holding a
    run with other settings is refused (ResumeRefused) unless `other_settings`: its metrics would mix the two."""
    from .card import build_card

    out_dir.mkdir(parents=True, exist_ok=True)
    card = build_card(
        config, engine, tokenizer, items, k, temperature, top_p, max_length, sources, limit, question_key, answer_key
    )
    changed = settings_changed(_stored_card(out_dir), card)
    if changed and not other_settings:
        raise ResumeRefused(out_dir, changed)
    if changed:
        log.warning("resuming %s with other settings than its first run: %s", out_dir, ", ".join(changed[:12]))
    path = out_dir / "trajectories.jsonl"
    drop_cut_tail(path)
    done = _done(path)
    keys = [(item["dataset"], item["id"]) for item in items]
    if len(set(keys)) != len(keys):
        dup = next(key for i, key in enumerate(keys) if key in keys[:i])
        raise ValueError(f"dataset {dup[0]!r} holds id {dup[1]!r} twice; items must be unique by (dataset, id)")
    todo = [(item, seed) for item in items for seed in range(k) if (item["dataset"], item["id"], seed) not in done]
    executor = AgentExecutor(config, for_training=False)
    sem = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(todo), desc="eval", unit=" item", disable=not progress)

    async def one(item: dict, seed: int, fh) -> None:
        async with sem:
            params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=None, seed=seed)
            started = time.perf_counter()
            row = EvalRow(
                dataset=item["dataset"],
                id=item["id"],
                seed=seed,
                question=item["question"],
                golden_answers=item["golden_answers"],
            )
            try:
                trajectory = await executor.run(
                    item["question"], item["golden_answers"], params, max_length, tokenizer, engine
                )
                if trajectory.stats.get("tool_errors_infra"):  # an outage is not a wrong answer: run it again
                    n = int(trajectory.stats["tool_errors_infra"])
                    row.status, row.error = "failed", f"{n} tool call(s) failed for the infrastructure (see the log)"
                else:
                    row.record(trajectory)
            except INFRA_ERRORS as exc:
                row.status, row.error = "failed", f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # noqa: BLE001 - one bad item must not end a run of thousands
                row.status, row.error = "error", f"{type(exc).__name__}: {exc}"
            row.seconds = round(time.perf_counter() - started, 3)
            # default=str: a stray object in logs must not end the run
            fh.write(json.dumps(row.to_json(), ensure_ascii=False, default=str) + "\n")
            fh.flush()
            bar.update()

    with open(path, "a", encoding="utf-8") as fh:
        await asyncio.gather(*(one(item, seed, fh) for item, seed in todo))
    bar.close()
    write_reports(out_dir, k, aggregate_file_name(config, temperature), card)
    return out_dir


class ResumeRefused(ValueError):
    """The output folder holds a run whose eval card differs from this one's in `fields`."""

    def __init__(self, folder: Path, fields: list[str], remedy: str = "--resume-other-settings to add to it"):
        self.folder, self.fields = folder, fields
        shown = ", ".join(fields[:6]) + (", ..." if len(fields) > 6 else "")
        super().__init__(f"{folder} holds a run with other settings ({shown}): give another --out, or {remedy}")


# Where the servers are, not what they serve: a KB or model moved to another port is the same run. A KB that did not
# answer has no description to compare, so its fields are compared only when both runs reached it.
ADDRESSES = ("kb.urls", "kb.unreachable", "model.base_urls", "agent_config.tools.local.urls")


def settings_changed(before: dict | None, now: dict) -> list[str]:
    """The card fields, other than the datasets (a resume may add some), in which `now` differs from `before`."""
    from .card import differences

    if before is None:
        return []
    blind = "unreachable" in before.get("kb", {}) or "unreachable" in now.get("kb", {})
    return [
        field
        for field, _, _ in differences(before, now)
        if not field.startswith("datasets.")
        and field not in ADDRESSES
        and not (blind and field.startswith("kb.") and field != "kb.top_k")
    ]


def _stored_card(out_dir: Path) -> dict | None:
    try:
        return json.loads((out_dir / "metrics.json").read_text()).get("card")
    except (OSError, ValueError, AttributeError):
        return None


def load_rows(out_dir: Path) -> list[EvalRow]:
    rows = _read_rows(out_dir / "trajectories.jsonl")
    latest: dict[tuple[str, str, int], EvalRow] = {}
    for row in rows:  # a retried item replaces its failed attempt
        if row.key not in latest or row.status == "ok":
            latest[row.key] = row
    return list(latest.values())


def aggregate_file_name(config: AgentConfig, temperature: float) -> str:
    """ASearcher's `aggregate_results_{agent}_{prompt}_{client}_t{T}.json`; the prompt is named by the agent type."""
    client = "async-search-access" if config.tools.backend == "local" else "async-web-search-access"
    return f"aggregate_results_{config.agent_type}_{config.agent_type}_{client}_t{temperature:.1f}.json"


def write_reports(out_dir: Path, k: int, aggregate_name: str | None = None, card: dict | None = None) -> dict:
    """metrics.json, summary.md and report.html from the rows; `card` None keeps the card metrics.json has."""
    from .report import render_html, render_markdown

    card = card if card is not None else _stored_card(out_dir)
    rows = load_rows(out_dir)
    metrics = compute_metrics(rows, k)
    if card is not None:
        metrics["card"] = card
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if aggregate_name:
        (out_dir / aggregate_name).write_text(json.dumps(asearcher_aggregate(rows, k), indent=2, ensure_ascii=False))
    (out_dir / "summary.md").write_text(render_markdown(metrics))
    (out_dir / "report.html").write_text(render_html(metrics, rows), encoding="utf-8")
    return metrics
