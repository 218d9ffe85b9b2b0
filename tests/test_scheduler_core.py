"""The streaming scheduler core: streaming hand-over, staleness bound, failures, filtering, the end."""

import asyncio
import random

import pytest

from asearcher_plugin.scheduler import StreamingScheduler


def make_runner(durations: dict, fail: set | None = None, seen: list | None = None):
    fail = fail if fail is not None else set()

    async def run(prompt):
        if seen is not None:
            seen.append(prompt)
        await asyncio.sleep(durations.get(prompt, 0.001))
        if prompt in fail:
            fail.discard(prompt) if prompt % 2 else None  # odd prompts fail once, even ones always
            raise RuntimeError(f"tool crashed on {prompt}")
        return [prompt * 10 + i for i in range(2)]

    return run


def test_batches_stream_while_a_straggler_runs():
    async def main():
        durations = {0: 0.5}  # prompt 0 is a long trajectory
        sched = StreamingScheduler(
            make_runner(durations), iter(range(40)), batch_size=4, max_concurrent=8, max_staleness=4
        )
        first = await sched.next_batch()
        assert [g.prompt for g in first] == [1, 2, 3, 4]  # not held back by prompt 0
        assert any(g.prompt == 0 for g in sched.in_flight())
        sched.set_version(1)
        second = await sched.next_batch()
        assert all(len(g.samples) == 2 for g in second)
        await sched.aclose()

    asyncio.run(main())


def test_default_keeps_stragglers_bounds_admission_and_drops_nothing():
    """AReaL's semantics: admission is bounded at every moment; a long group runs on and is consumed late."""
    rng = random.Random(1)
    durations = {p: rng.choice([0.001, 0.002, 0.003, 0.08]) for p in range(60)}

    async def main():
        sched = StreamingScheduler(
            make_runner(durations), iter(range(60)), batch_size=4, max_concurrent=12, max_staleness=1
        )
        admit = sched._admit

        def checked_admit():  # the invariant at every admission, not just between batches
            admit()
            assert sched.admitted <= sched.capacity()

        sched._admit = checked_admit
        consumed, version, late = [], 0, 0
        while True:
            try:
                batch = await sched.next_batch()
            except EOFError:
                break
            late += sum(version - g.admitted_version > 1 for g in batch)
            consumed += [g.prompt for g in batch]
            await asyncio.sleep(0.004)  # a training step
            version += 1
            sched.set_version(version)
        assert sorted(consumed) == list(range(60))  # drained: every prompt exactly once, none dropped
        assert sched.stats["stale_restarted"] == sched.stats["stale_dropped"] == 0
        assert late > 0  # the 80 ms groups outlived eta + 1 steps and were kept, not restarted

    asyncio.run(main())


def test_restart_mode_bounds_staleness_and_admission_respects_capacity():
    rng = random.Random(0)
    durations = {p: rng.choice([0.001, 0.002, 0.003, 0.05]) for p in range(400)}

    async def main():
        for eta in (0, 1, 3):
            sched = StreamingScheduler(
                make_runner(durations),
                iter(range(400)),
                batch_size=5,
                max_concurrent=12,
                max_staleness=eta,
                on_stale="restart",
            )
            for version in range(12):
                batch = await sched.next_batch()
                assert len(batch) == 5
                assert all(version - g.admitted_version <= eta for g in batch)
                assert sched.admitted <= sched.capacity()
                await asyncio.sleep(0.004)  # a training step
                sched.set_version(version + 1)
            await sched.aclose()

    asyncio.run(main())


def test_a_straggler_past_eta_is_restarted_once_then_dropped():
    runs = {0: [10.0, 0.001], 5: [10.0, 10.0]}  # 0 is slow once; 5 is always too slow to finish in time

    async def run(prompt):
        await asyncio.sleep(runs[prompt].pop(0) if prompt in runs else 0.001)
        return [prompt]

    async def main():
        sched = StreamingScheduler(
            run, iter(range(20)), batch_size=2, max_concurrent=3, max_staleness=1, on_stale="restart"
        )
        consumed, version = [], 0
        while True:
            try:
                batch = await asyncio.wait_for(sched.next_batch(), timeout=5)
            except EOFError:
                break
            assert all(version - g.admitted_version <= 1 for g in batch)
            consumed += batch
            version += 1
            sched.set_version(version)
        assert sorted(g.prompt for g in consumed) == [p for p in range(20) if p != 5]
        (zero,) = [g for g in consumed if g.prompt == 0]
        assert zero.restarts == 1 and zero.admitted_version >= 2  # started afresh under a newer policy
        assert sched.stats["stale_restarted"] == 2 and sched.stats["stale_dropped"] == 1
        assert sched.prompts_drawn == 20 and not sched.unconsumed_prompts()

    asyncio.run(main())


def test_a_failing_rollout_is_retried_once_then_dropped():
    async def main():
        seen = []
        sched = StreamingScheduler(
            make_runner({}, fail={3, 4}, seen=seen), iter(range(10)), batch_size=4, max_concurrent=4, max_staleness=10
        )
        prompts = []
        try:
            while True:
                prompts += [g.prompt for g in await sched.next_batch()]
        except EOFError:
            pass
        assert sorted(prompts) == [0, 1, 2, 3, 5, 6, 7, 8, 9]  # 3 succeeded on retry, 4 failed twice
        assert seen.count(3) == 2 and seen.count(4) == 2
        assert sched.stats["failed"] == 3 and sched.stats["retried"] == 2 and sched.prompts_drawn == 10

    asyncio.run(main())


def test_dynamic_filtering_replaces_groups_and_counts_prompts_exactly():
    async def main():
        keep = lambda g: g.prompt % 3 != 0  # noqa: E731 - e.g. all rewards equal
        sched = StreamingScheduler(
            make_runner({}), iter(range(30)), batch_size=5, max_concurrent=6, max_staleness=1, keep_group=keep
        )
        got = []
        for v in range(3):
            got += [g.prompt for g in await sched.next_batch()]
            sched.set_version(v + 1)
        assert len(got) == 15 and all(p % 3 for p in got)
        # Every prompt drawn from the dataset is accounted for: consumed, filtered, stale, or still pending.
        pending = len(sched.unconsumed_prompts())
        assert sched.prompts_drawn == len(got) + sched.stats["filtered"] + sched.stats["stale_dropped"] + pending
        assert sched.stats["filtered"] >= 5
        await sched.aclose()

    asyncio.run(main())


def test_end_of_prompts_gives_a_last_smaller_batch_then_eof():
    async def main():
        sched = StreamingScheduler(make_runner({}), iter(range(7)), batch_size=5, max_concurrent=3, max_staleness=5)
        assert len(await sched.next_batch()) == 5
        assert [g.prompt for g in await sched.next_batch()] == [5, 6]
        with pytest.raises(EOFError):
            await sched.next_batch()

    asyncio.run(main())


def test_bad_arguments():
    with pytest.raises(ValueError):
        StreamingScheduler(make_runner({}), iter([]), batch_size=0, max_concurrent=1)
    with pytest.raises(ValueError, match="on_stale"):
        StreamingScheduler(make_runner({}), iter([]), batch_size=1, max_concurrent=1, on_stale="drop")


def test_a_dead_engine_stops_the_scheduler_with_its_name():
    from asearcher_plugin.scheduler import FatalRolloutError

    async def run(prompt):
        await asyncio.sleep(0.001)
        if prompt == 2:
            raise FatalRolloutError("engine 1 (Ray actor abc) died")
        return [prompt]

    async def main():
        sched = StreamingScheduler(run, iter(range(20)), batch_size=4, max_concurrent=4, max_staleness=3)
        with pytest.raises(FatalRolloutError, match="engine 1"):
            for _ in range(5):
                await sched.next_batch()
        await sched.aclose()

    asyncio.run(main())


def test_version_clock_dates_tokens_with_the_version_then_in_force():
    from asearcher_plugin.scheduler.core import VersionClock, token_versions

    clock = VersionClock()
    clock.record(1, at=100.0)
    clock.record(1, at=150.0)  # no change, no entry
    clock.record(2, at=200.0)
    assert [clock.version_at(t) for t in (50.0, 100.0, 199.9, 200.0, 1e12)] == [0, 1, 1, 2, 2]
    assert token_versions(clock, [120.0, 210.0]) == {"first_token_version": 1, "last_token_version": 2}
    assert token_versions(clock, None) == {"first_token_version": None, "last_token_version": None}


def test_stale_spans_are_the_calls_more_than_eta_versions_behind_the_training_update():
    from asearcher_plugin.scheduler.core import stale_spans

    spans = [(10, 20), (30, 35), (50, 60), (70, 71)]
    # trained by update 5 with eta 2: calls under versions 0 and 2 are 5 and 3 behind, version 3 is 2 behind
    assert stale_spans(spans, [0, 2, 3, None], train_version=5, eta=2) == [(10, 20), (30, 35)]
    assert stale_spans(spans, [3, 3, 4, 5], train_version=5, eta=2) == []
    with pytest.raises(ValueError):  # a version per span, or the spans and versions were misaligned
        stale_spans(spans, [0, 1], train_version=5, eta=2)
