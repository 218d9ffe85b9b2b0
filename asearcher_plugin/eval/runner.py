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
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..config import AgentConfig
from ..engines.openai import EngineUnavailable
from ..engines.types import SamplingParams
from ..env import AgentExecutor
from ..jsonl import drop_cut_tail
from .metrics import summarise

INFRA_ERRORS = (EngineUnavailable, ConnectionError, TimeoutError, OSError)


def item_key(row: dict) -> tuple[str, str, int]:
    # FlashRAG files all number their questions `test_0`, `test_1`, ...: ids are unique only
    # within a dataset.
    return row["dataset"], row["id"], row["seed"]


def _done(path: Path) -> set[tuple[str, str, int]]:
    done = set()
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash
            if row.get("status") == "ok":
                done.add(item_key(row))
    return done


async def run_eval(items: list[dict], config: AgentConfig, engine, tokenizer, out_dir: Path, k: int = 1,
                   concurrency: int = 8, max_length: int = 8192, temperature: float = 0.6, top_p: float = 0.95,
                   progress: bool = True) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "trajectories.jsonl"
    drop_cut_tail(path)
    done = _done(path)
    keys = [(item["dataset"], item["id"]) for item in items]
    if len(set(keys)) != len(keys):
        dup = next(key for i, key in enumerate(keys) if key in keys[:i])
        raise ValueError(f"dataset {dup[0]!r} holds id {dup[1]!r} twice; items must be unique by (dataset, id)")
    todo = [(item, seed) for item in items for seed in range(k)
            if (item["dataset"], item["id"], seed) not in done]
    executor = AgentExecutor(config, for_training=False)
    sem = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(todo), desc="eval", unit=" item", disable=not progress)

    async def one(item: dict, seed: int, fh) -> None:
        async with sem:
            params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=None, seed=seed)
            started = time.perf_counter()
            row = {"id": item["id"], "dataset": item["dataset"], "seed": seed, "question": item["question"],
                   "golden_answers": item["golden_answers"]}
            try:
                result = await executor.execute(item["question"], item["golden_answers"], params, max_length,
                                                tokenizer, engine)
                logs = result["extra_logs"]
                row.update(status="ok", answer=result["answer"], reward=result["reward"], text=result["text"],
                           truncated=result["truncated"], logs=logs,
                           scores={k_[6:]: v for k_, v in logs.items() if k_.startswith("score_")},
                           tokens=len(result["observation_tokens"] or []),
                           gen_tokens=sum(b - a for a, b in result["action_ranges"] or []))
            except INFRA_ERRORS as exc:
                row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # noqa: BLE001 - one bad item must not end a run of thousands
                row.update(status="error", error=f"{type(exc).__name__}: {exc}")
            row["seconds"] = round(time.perf_counter() - started, 3)
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")  # a stray object in logs must not end the run
            fh.flush()
            bar.update()

    with open(path, "a", encoding="utf-8") as fh:
        await asyncio.gather(*(one(item, seed, fh) for item, seed in todo))
    bar.close()
    write_reports(out_dir, k, aggregate_file_name(config, temperature))
    return out_dir


def load_rows(out_dir: Path) -> list[dict]:
    rows = []
    for line in (out_dir / "trajectories.jsonl").read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    latest = {}
    for row in rows:  # a retried item replaces its failed attempt
        key = item_key(row)
        if key not in latest or row["status"] == "ok":
            latest[key] = row
    return list(latest.values())


def compute_metrics(rows: list[dict], k: int) -> dict:
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] == "failed"]
    errors = [r for r in rows if r["status"] not in ("ok", "failed")]
    metrics = {"k": k, "items_ok": len(ok), "items_failed": len(failed), "items_error": len(errors), "datasets": {}}
    groups = {"overall": ok}
    for r in ok:
        groups.setdefault(r["dataset"], []).append(r)
    for name, group in groups.items():
        by_q: dict[tuple[str, str], list[dict]] = {}
        for r in group:
            by_q.setdefault((r["dataset"], r["id"]), []).append(r)
        names = sorted({m for r in group for m in r["scores"]})
        entry = {m: summarise([[x["scores"].get(m, 0.0) for x in sorted(rs, key=lambda x: x["seed"])]
                               for rs in by_q.values()], k) for m in names}
        entry["distributions"] = {key: _dist([r["logs"].get(key, 0.0) for r in group])
                                  for key in ("turns", "searches", "accesses", "invalid_actions", "tool_errors")}
        entry["distributions"]["tokens"] = _dist([r.get("tokens", 0) for r in group])
        metrics["datasets"][name] = entry
    return metrics


def _dist(values: list[float]) -> dict:
    if not values:
        return {}
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "max": float(a.max())}


# ASearcher's metric names for ours: its F1 is the set-based one, CEM is cover-EM, MBE the judge's verdict.
ASEARCHER_METRICS = {"F1": "asearcher_f1", "EM": "em", "CEM": "cover_em", "MBE": "judge"}


def aggregate_file_name(config: AgentConfig, temperature: float) -> str:
    """ASearcher's `aggregate_results_{agent}_{prompt}_{client}_t{T}.json`; the prompt is named by the agent type."""
    client = "async-search-access" if config.tools.backend == "local" else "async-web-search-access"
    return f"aggregate_results_{config.agent_type}_{config.agent_type}_{client}_t{temperature:.1f}.json"


def asearcher_aggregate(rows: list[dict], k: int) -> dict:
    """Per dataset, the shape of ASearcher's aggregate file: `num` questions, each metric's mean over every
    (question, run), `{metric}.Max@{k}` (mean over questions of the best of the first k runs), and the
    average generated tokens, searches and page accesses per trajectory."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r["dataset"] for r in rows if r["status"] == "ok"):
        group = [r for r in rows if r["status"] == "ok" and r["dataset"] == name]
        by_q: dict[str, list[dict]] = {}
        for r in sorted(group, key=lambda r: r["seed"]):
            by_q.setdefault(r["id"], []).append(r)
        entry: dict = {"num": len(by_q)}
        for theirs, ours in ASEARCHER_METRICS.items():
            if not all(ours in r["scores"] for r in group):
                continue
            runs = [[r["scores"][ours] for r in rs] for rs in by_q.values()]
            entry[theirs] = float(np.mean([v for vs in runs for v in vs]))
            entry[f"{theirs}.Max@{k}"] = float(np.mean([max(vs[:k]) for vs in runs]))
        if all("gen_tokens" in r for r in group):
            entry["avg_gen_len"] = float(np.mean([r["gen_tokens"] for r in group]))
        entry["avg_num_searchs"] = float(np.mean([r["logs"].get("searches", 0.0) for r in group]))
        entry["avg_num_access"] = float(np.mean([r["logs"].get("accesses", 0.0) for r in group]))
        out[name] = entry
    return out


def write_reports(out_dir: Path, k: int, aggregate_name: str | None = None) -> dict:
    from .report import render_html, render_markdown

    rows = load_rows(out_dir)
    metrics = compute_metrics(rows, k)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    if aggregate_name:
        (out_dir / aggregate_name).write_text(json.dumps(asearcher_aggregate(rows, k), indent=2, ensure_ascii=False))
    (out_dir / "summary.md").write_text(render_markdown(metrics))
    (out_dir / "report.html").write_text(render_html(metrics, rows), encoding="utf-8")
    return metrics
