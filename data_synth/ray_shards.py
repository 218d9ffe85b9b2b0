"""Synthesis across a Ray cluster: seeds in shards, each shard a task running the async loop.

Results come back to the driver shard by shard, where the one writer deduplicates and appends them;
a shard lost with its node is re-run by Ray (`max_retries`), and a crashed driver resumes from the
files like a local run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .config import SynthConfig

# The per-seed loop a shard runs: `await run_items(cfg, seeds, on_result)`. The caller hands it in, so this
# module knows Ray and nothing of what a seed goes through.
RunItems = Callable[[SynthConfig, list, Callable], Awaitable[None]]


def _shard(run_items: RunItems, cfg_json: str, seeds: list[dict]) -> list:
    results: list = []
    asyncio.run(run_items(SynthConfig.model_validate_json(cfg_json), seeds, results.append))
    return results


def run_on_ray(
    run_items: RunItems,
    cfg: SynthConfig,
    seeds: list[dict],
    address: str,
    shard_size: int,
    on_results: Callable[[list], None],
) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, ignore_reinit_error=True, log_to_driver=False)
    task = ray.remote(num_cpus=1, max_retries=2)(_shard)
    cfg_json = cfg.model_dump_json()
    pending = [task.remote(run_items, cfg_json, seeds[i : i + shard_size]) for i in range(0, len(seeds), shard_size)]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        on_results(ray.get(done[0]))
