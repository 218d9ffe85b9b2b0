"""The streaming scheduler under a tool endpoint outage: failed groups run again, admission pauses, a budget ends it.

The groups' work is a stand-in coroutine; the endpoint is a flag the test flips (the breaker's probe reads it), as
a KB server going down and coming back. The same path through OpenRLHF's train() with a real KB server killed and
restarted is in test_openrlhf_train_cpu.py.
"""

import asyncio

import pytest

from asearcher_plugin.scheduler.breaker import OutageBreaker
from asearcher_plugin.scheduler.core import StreamingScheduler
from asearcher_plugin.scheduler.errors import EndpointOutage, OutageBudgetExceeded

N = 2  # trajectories per group


class Endpoint:
    def __init__(self):
        self.up = True
        self.calls = []  # (prompt, up) for every group started

    async def run_group(self, prompt):
        self.calls.append((prompt, self.up))
        await asyncio.sleep(0.01)
        if not self.up:
            raise EndpointOutage("KB unavailable", trajectories=N)
        return [f"{prompt}/{i}" for i in range(N)]

    async def probe(self) -> bool:
        return self.up


def scheduler(endpoint, prompts, budget_s=60.0, probe=True, **kw):
    breaker = OutageBreaker(budget_s=budget_s, probe=endpoint.probe if probe else None, backoff_s=0.02)
    return StreamingScheduler(
        endpoint.run_group, iter(prompts), batch_size=2, max_concurrent=2, max_staleness=100, breaker=breaker, **kw
    )


async def drain(sched) -> list[list]:
    batches = []
    while True:
        try:
            batches.append(await sched.next_batch())
        except EOFError:
            return batches


@pytest.mark.asyncio
async def test_groups_of_an_outage_run_again_and_admission_waits_for_the_endpoint():
    endpoint = Endpoint()
    sched = scheduler(endpoint, [f"p{i}" for i in range(6)])
    first = await sched.next_batch()
    endpoint.up = False
    await asyncio.sleep(0.1)  # the groups in flight fail; the breaker opens
    started_while_down = len(endpoint.calls)
    await asyncio.sleep(0.3)  # the probe keeps failing: nothing new starts
    assert len(endpoint.calls) == started_while_down
    assert sched.breaker.open and sched.stats["outage_reruns"] >= 1
    endpoint.up = True
    rest = await drain(sched)
    handed = [s for batch in [first, *rest] for g in batch for s in g.samples]
    # every prompt once, each from an attempt that ran while the endpoint was up; the failed ones ran again
    assert sorted(handed) == sorted(f"p{i}/{j}" for i in range(6) for j in range(N))
    failed = [p for p, up in endpoint.calls if not up]
    assert failed and all((p, True) in endpoint.calls for p in failed)
    assert sched.stats["outage_reruns"] == len(failed)
    assert sched.stats["outage_discarded"] == N * len(failed)
    assert sched.stats["failed"] == 0 and not sched.breaker.open
    assert sched.breaker.outages == 1 and sched.breaker.outage_seconds >= 0.3
    await sched.aclose()


@pytest.mark.asyncio
async def test_an_outage_longer_than_the_budget_ends_the_run_with_its_error():
    endpoint = Endpoint()
    endpoint.up = False
    sched = scheduler(endpoint, [f"p{i}" for i in range(4)], budget_s=0.2)
    with pytest.raises(
        OutageBudgetExceeded, match=r"outage budget of 0.2 s \(scheduler.outage_budget_s\).*KB unavail"
    ):
        await asyncio.wait_for(sched.next_batch(), timeout=10)
    assert {p for p, _ in endpoint.calls} == {"p0", "p1"}  # only what was in flight when it failed
    await sched.aclose()


@pytest.mark.asyncio
async def test_without_a_probe_the_breaker_lets_work_through_after_its_backoff():
    endpoint = Endpoint()
    sched = scheduler(endpoint, [f"p{i}" for i in range(4)], probe=False)
    endpoint.up = False
    task = asyncio.ensure_future(drain(sched))
    await asyncio.sleep(0.2)  # several half-open trials fail, each opening the breaker again
    endpoint.up = True
    batches = await asyncio.wait_for(task, timeout=10)
    assert sorted(s for b in batches for g in b for s in g.samples) == sorted(
        f"p{i}/{j}" for i in range(4) for j in range(N)
    )
    assert sched.stats["outage_reruns"] >= 2 and sched.breaker.outages == 1
    await sched.aclose()


@pytest.mark.asyncio
async def test_only_work_started_after_the_failure_ends_the_outage():
    breaker = OutageBreaker(budget_s=60, probe=None, backoff_s=60)
    before = breaker.trips
    breaker.trip("KB unavailable")
    breaker.healthy(before)  # a group that started before the failure finished fine: says nothing
    assert breaker.outage_seconds > 0 and breaker._down_since is not None
    breaker.healthy(breaker.trips)
    assert breaker._down_since is None
    await breaker.aclose()
