"""`asearcher synth`: seeds through the item loop, concurrently in one process or in shards on Ray.

Either way a single writer in the driver appends results as items finish, so deduplication sees
every question and a resumed run skips what is already written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from .chat import ChatClient
from .config import SynthConfig
from .dedup import NearDuplicates
from .item import Context, synth_item
from .output import Output
from .records import SynthItem
from .stats import write_stats


async def run_items(cfg: SynthConfig, seeds: list[dict], on_result: Callable[[SynthItem], None]) -> None:
    """Every seed through `synth_item`, `cfg.concurrency` at a time; `on_result` as each finishes."""
    from asearcher_plugin.tools import make_toolbox

    tools = make_toolbox(cfg.tools)
    ctx = Context(cfg, ChatClient("generator", cfg.generator), ChatClient("judge", cfg.judge), tools)
    sem = asyncio.Semaphore(cfg.concurrency)

    async def one(seed: dict) -> None:
        async with sem:
            on_result(await synth_item(ctx, seed))

    try:
        await asyncio.gather(*(one(s) for s in seeds))
    finally:
        await ctx.generator.aclose()
        await ctx.judge.aclose()
        await tools.aclose()


def _drop_duplicate_seeds(seeds: list[dict], cfg: SynthConfig, out: Output) -> list[dict]:
    seen = NearDuplicates(cfg.dedup_threshold)
    kept = []
    for s in seeds:
        dup = seen.add(s["id"], s["question"]) if "question" in s else None
        if dup is None:
            kept.append(s)
        elif s["id"] not in out.finished:
            out.write(
                SynthItem(seed_id=s["id"], source="seed", status="dropped", reason="near-duplicate seed", detail=dup)
            )
    return kept


def run_synth(
    seeds: list[dict],
    cfg: SynthConfig,
    out_dir: Path,
    ray_address: str | None = None,
    shard_size: int = 32,
    progress: bool = True,
) -> dict:
    out = Output(Path(out_dir), cfg)
    todo = [s for s in _drop_duplicate_seeds(seeds, cfg, out) if s["id"] not in out.finished]
    bar = tqdm(total=len(todo), desc="synth", unit=" seed", disable=not progress)

    def on_result(result: SynthItem) -> None:
        out.write(result)
        bar.update()
        bar.set_postfix(emitted=out.emitted, refresh=False)

    try:
        if ray_address:
            from .ray_shards import run_on_ray

            run_on_ray(run_items, cfg, todo, ray_address, shard_size, lambda results: [on_result(r) for r in results])
        else:
            asyncio.run(run_items(cfg, todo, on_result))
    finally:
        bar.close()
        out.close()
    return write_stats(Path(out_dir), cfg.max_solve_rate)
