"""The staleness of trained tokens as the benchmarks report it (benchmarks/trained_staleness.py), from the records
the harness's engine actor and policy actor leave; on the real chain: tests/test_openrlhf_train_cpu.py's mask run."""

from __future__ import annotations

import asyncio
import json

import pytest

from asearcher_plugin.openrlhf.cpu.actors import EngineVersion
from benchmarks.trained_staleness import read_calls, sample_staleness, trained_staleness


def fit(broadcasts: int, *samples: tuple[int, int, int]) -> dict:
    """A fit-log line with one experience of `samples`: (engine pid, trajectory, tokens masked)."""
    info = {
        "harness_engine_pid": [float(p) for p, _, _ in samples],  # as float32 info may carry them
        "harness_trajectory": [float(t) for _, t, _ in samples],
        "stale_tokens_masked": [m for _, _, m in samples],
    }
    return {"broadcasts": broadcasts, "experiences": [{"info": info}]}


def test_each_token_is_as_stale_as_its_call_and_masked_tokens_are_the_oldest(tmp_path):
    (tmp_path / "versions-7.jsonl").write_text(
        json.dumps({"trajectory": 1, "calls": [[0, 5], [0, 3]]})
        + "\n"
        + json.dumps({"trajectory": 2, "calls": [[0, 10], [1, 6], [3, 4]]})
        + "\n"
    )
    (tmp_path / "versions-9.jsonl").write_text(json.dumps({"trajectory": 1, "calls": [[2, 7]]}) + "\n")
    (tmp_path / "engine-9.jsonl").write_text("[0, 1]\n")  # the busy intervals beside them are not calls
    calls = read_calls(tmp_path)
    assert set(calls) == {(7, 1), (7, 2), (9, 1)}
    # trained before any broadcast: 8 tokens 0 behind; after 4 broadcasts: trajectory 2 with 12 tokens masked (its
    # first call's 10 and 2 of the second's 6), so 4 tokens 3 behind and 4 tokens 1 behind; trajectory 1 of pid 9,
    # 7 tokens 2 behind
    fits = [fit(0, (7, 1, 0)), fit(4, (7, 2, 12), (9, 1, 0))]
    assert sample_staleness(fits, calls) == [[(0, 5), (0, 3)], [(3, 4), (1, 4)], [(2, 7)]]
    got = trained_staleness(fits, calls)
    assert got["max"] == 3 and got["tokens"] == 23
    assert got["over"] == {1: 11 / 23, 2: 4 / 23, 4: 0.0}


def test_a_trained_sample_without_its_calls_is_named():
    with pytest.raises(KeyError, match="trajectory 3 of engine pid 5"):
        trained_staleness([fit(1, (5, 3, 0))], {(5, 4): [[0, 1]]})


def test_the_engine_counts_one_version_per_broadcast():
    """OpenRLHF's broadcast sends every parameter through `update_weight`, the last with `empty_cache=True`."""

    class Engine:
        async def update_weight(self, name, dtype, shape, empty_cache=False):
            return name

    engine = type("Counted", (EngineVersion, Engine), {})()

    async def broadcast(params: int):
        for i in range(params):
            assert await engine.update_weight(f"p{i}", "float32", (1,), empty_cache=i == params - 1) == f"p{i}"

    assert engine.asearcher_weight_version == 0
    asyncio.run(broadcast(3))
    assert engine.asearcher_weight_version == 1
    asyncio.run(broadcast(2))
    assert engine.asearcher_weight_version == 2
