"""A framework-free streaming rollout scheduler.

Up to `max_concurrent` prompt groups are in flight at all times; as soon as any group finishes,
another prompt is admitted. `next_batch()` hands out B complete groups as soon as B are ready,
oldest admitted first, while stragglers keep running into the next training step.

Staleness (AReaL's rule): with policy version v and batch size B, the number of groups ever
admitted is kept <= (eta + v + 1) * B. Groups are consumed oldest first, so a group that finishes
in its turn is trained at most eta versions after its admission. By default (`on_stale="keep"`)
a running group is never stopped: a long trajectory simply runs its later turns under newer
weights (every trajectory records the versions of its first and last token) and is consumed with
a larger admission staleness, which is reported, and which importance-sampling correction is for.
`on_stale="restart"` instead stops a group more than eta versions behind and starts its prompt
afresh once (then drops it), so that no consumed trajectory is staler than eta. `on_stale="mask"` admits
as `keep` does; the trainer's adapter then takes out of the loss every model turn generated more than eta
versions before the update that trains it (`stale_spans`), while the trajectory's reward still counts.

A group whose rollout raised `EndpointOutage` (a tool endpoint down, not the model's doing) is discarded and runs
again, keeping its place; its failure opens the `OutageBreaker`, which pauses all admission until the endpoints
answer (see breaker.py).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from .breaker import OutageBreaker
from .errors import EndpointOutage, FatalRolloutError

__all__ = ["FatalRolloutError", "Group", "StreamingScheduler", "VersionClock", "stale_spans", "token_versions"]

log = logging.getLogger(__name__)


@dataclass
class Group:
    """The n trajectories of one prompt, with the policy versions they saw."""

    index: int  # admission order
    prompt: Any
    samples: list = field(default_factory=list)
    admitted_version: int = 0
    attempts: int = 0
    restarts: int = 0  # times it was started afresh after falling more than eta versions behind
    trips_at_start: int = 0  # the outage breaker's failure count when this attempt started


RunGroup = Callable[[Any], Awaitable[list]]


class VersionClock:
    """When each policy version began (wall clock), to date a trajectory's first and last token.

    Versions are recorded when the scheduler learns of them, after the weights changed, so the
    version found for a time is a lower bound: staleness computed from it is never understated.
    """

    def __init__(self, version: int = 0):
        self.times, self.versions = [float("-inf")], [version]

    def record(self, version: int, at: float | None = None) -> None:
        if version != self.versions[-1]:
            self.times.append(time.time() if at is None else at)
            self.versions.append(version)

    def version_at(self, t: float | None) -> int | None:
        if t is None:
            return None
        return self.versions[bisect.bisect_right(self.times, t) - 1]


def stale_spans(spans, versions, train_version: int, eta: int) -> list[tuple[int, int]]:
    """The generated spans (one per model call) whose call began more than eta versions before `train_version`,
    the update that trains them. A call's version is the one its first token was sampled under (a lower bound, as
    every version found by the clock is), so a turn that straddles a weight update counts as the older policy's."""
    return [tuple(s) for s, v in zip(spans, versions, strict=True) if v is not None and train_version - v > eta]


def token_versions(clock: VersionClock, token_times) -> dict:
    """The policy versions of a trajectory's first and last generated token (None if unknown), from the wall
    clock times of its first and last model call (`Trajectory.token_times`)."""
    first, last = (token_times or [None, None])[:2]
    return {"first_token_version": clock.version_at(first), "last_token_version": clock.version_at(last)}


class StreamingScheduler:
    def __init__(
        self,
        run_group: RunGroup,
        prompts: Iterator[Any],
        batch_size: int,
        max_concurrent: int,
        max_staleness: int = 1,
        keep_group: Callable[[Group], bool] | None = None,
        max_retries: int = 1,
        on_stale: Literal["keep", "restart", "mask"] = "keep",
        max_stale_restarts: int = 1,
        consume_lag: int = 0,
        admitted_before: int = 0,
        breaker: OutageBreaker | None = None,
    ):
        """`consume_lag`: versions between the engines' weights and those that train the next batch handed out
        (OpenRLHF's async queue adds async_queue_size); "restart" counts staleness against the latter.
        `admitted_before`: groups admitted by earlier passes over the data (episodes) of the same run, which
        count against the same budget since the version keeps growing across them."""
        if batch_size < 1 or max_concurrent < 1 or max_staleness < 0:
            raise ValueError("batch_size and max_concurrent must be >= 1 and max_staleness >= 0")
        if on_stale not in ("keep", "restart", "mask"):
            raise ValueError(f"on_stale must be 'keep', 'restart' or 'mask', got {on_stale!r}")
        self.on_stale, self.consume_lag = on_stale, consume_lag
        self.run_group, self.prompts = run_group, iter(prompts)
        self.batch_size, self.max_concurrent, self.eta = batch_size, max_concurrent, max_staleness
        self.keep_group, self.max_retries, self.max_stale_restarts = keep_group, max_retries, max_stale_restarts
        self.version = 0
        self.clock = VersionClock()
        self.admitted = admitted_before  # groups counted against the staleness budget
        self.prompts_drawn = 0
        self.exhausted = False
        self._retry: list[Group] = []
        self._restart: list[Group] = []
        self._rerun: list[Group] = []  # discarded for an endpoint outage: run again once the endpoints answer
        self.breaker = breaker or OutageBreaker(budget_s=float("inf"))
        self._in_flight: dict[asyncio.Task, Group] = {}
        self._ready: list[Group] = []
        self._counter = itertools.count()
        self._changed = asyncio.Event()
        self._ready_event = asyncio.Event()
        self._pump_task: asyncio.Task | None = None
        self.peak_over_capacity = float("-inf")  # max of admitted - capacity right after any admission
        self.stats = {
            "finished": 0,
            "filtered": 0,
            "failed": 0,
            "retried": 0,
            "consumed": 0,
            "stale_restarted": 0,
            "stale_dropped": 0,
            "outage_reruns": 0,
            "outage_discarded": 0,
        }

    # -- what the trainer calls ------------------------------------------------------------
    def start(self) -> None:
        """Starts admitting prompts; in-flight groups keep running while the trainer trains."""
        if self._pump_task is None:
            self._pump_task = asyncio.ensure_future(self._pump())

    def set_version(self, version: int) -> None:
        """After each weight update: a newer policy lets more groups in, and too-old ones out."""
        self.version = version
        self.clock.record(version)
        if self.on_stale == "restart":
            self._drop_stale()
        self._changed.set()

    async def next_batch(self) -> list[Group]:
        """B finished groups, oldest admitted first. Raises EOFError when the prompts are used up."""
        self.start()
        while len(self._ready) < self.batch_size:
            if self._pump_task.done():
                self._pump_task.result()  # re-raise a scheduler crash rather than hang
                if not self._ready:
                    raise EOFError("no prompts left")
                break  # the dataset ended: a last, smaller batch
            self._ready_event.clear()
            await self._ready_event.wait()
        self._ready.sort(key=lambda g: g.index)
        batch, self._ready = self._ready[: self.batch_size], self._ready[self.batch_size :]
        self.stats["consumed"] += len(batch)
        return batch

    def drained(self) -> bool:
        """No prompt left to draw, nothing running and nothing waiting to be handed out."""
        return self._pump_task is not None and self._pump_task.done() and not self._ready

    def in_flight(self) -> list[Group]:
        return list(self._in_flight.values())

    def unconsumed_prompts(self) -> list:
        """Prompts drawn and not yet handed out (running, finished, or waiting to run again), oldest first."""
        groups = [*self._in_flight.values(), *self._ready, *self._retry, *self._restart, *self._rerun]
        return [g.prompt for g in sorted(groups, key=lambda g: g.index)]

    async def aclose(self) -> None:
        tasks = list(self._in_flight) + ([self._pump_task] if self._pump_task else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._in_flight.clear()
        await self.breaker.aclose()

    async def _pump(self) -> None:
        try:
            while True:
                self._admit()
                if not self._in_flight and self.exhausted and not (self._retry or self._restart or self._rerun):
                    return
                self._changed.clear()
                waiters = [asyncio.ensure_future(self._changed.wait())]
                if self.breaker.open:
                    waiters.append(asyncio.ensure_future(self.breaker.wait_closed()))
                await asyncio.wait([*self._in_flight, *waiters], return_when=asyncio.FIRST_COMPLETED)
                for waiter in waiters:
                    waiter.cancel()
                self._collect()
        finally:
            self._ready_event.set()

    # -- internals -------------------------------------------------------------------------
    def capacity(self) -> int:
        return (self.eta + self.version + 1) * self.batch_size

    def _too_stale(self, group: Group) -> bool:
        return self.version + self.consume_lag - group.admitted_version > self.eta

    def _drop_stale(self) -> None:
        """A group started more than eta versions ago can no longer be consumed: stop it and free its slot;
        its prompt starts afresh (a new admission under the current version) up to max_stale_restarts times."""
        stale = []
        for task, group in list(self._in_flight.items()):
            if self._too_stale(group):
                task.cancel()
                del self._in_flight[task]
                stale.append(group)
        stale += [g for g in self._ready if self._too_stale(g)]
        self._ready = [g for g in self._ready if not self._too_stale(g)]
        for group in stale:
            self.admitted -= 1
            if group.restarts < self.max_stale_restarts:
                group.restarts += 1
                group.attempts, group.samples = 0, []
                self._restart.append(group)
                self.stats["stale_restarted"] += 1
            else:
                self.stats["stale_dropped"] += 1

    def _admit(self) -> None:
        if self.breaker.open:  # nothing starts while the tool endpoints are down
            self.breaker.check_budget()
            return
        while len(self._in_flight) < self.max_concurrent and (
            self._rerun or self._retry or self.admitted < self.capacity()
        ):
            if self._rerun or self._retry:
                # keeps its place in the staleness budget
                group = self._rerun.pop(0) if self._rerun else self._retry.pop(0)
            elif self._restart:
                group = self._restart.pop(0)  # keeps its index: consumed in dataset order when it finishes
                self.admitted += 1
            else:
                if self.exhausted:
                    return
                try:
                    prompt = next(self.prompts)
                except StopIteration:
                    self.exhausted = True
                    return
                self.prompts_drawn += 1
                self.admitted += 1
                group = Group(index=next(self._counter), prompt=prompt)
            group.admitted_version = self.version
            group.attempts += 1
            group.trips_at_start = self.breaker.trips
            task = asyncio.ensure_future(self.run_group(group.prompt))
            self._in_flight[task] = group
            self.peak_over_capacity = max(self.peak_over_capacity, self.admitted - self.capacity())

    def _collect(self) -> None:
        for task in [t for t in self._in_flight if t.done()]:
            group = self._in_flight.pop(task)
            exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
            if isinstance(exc, FatalRolloutError):
                raise exc
            if isinstance(exc, EndpointOutage):
                self.stats["outage_reruns"] += 1
                self.stats["outage_discarded"] += exc.trajectories
                group.samples, group.attempts = [], group.attempts - 1  # not the prompt's failure
                self._rerun.append(group)
                self.breaker.trip(f"prompt {group.index}: {exc}")
                continue
            if exc is not None:
                self.stats["failed"] += 1
                log.warning("rollout of prompt %s failed (attempt %d): %r", group.index, group.attempts, exc)
                if group.attempts <= self.max_retries:
                    self.stats["retried"] += 1
                    self._retry.append(group)
                else:
                    self.admitted -= 1  # frees its slot: it will never be consumed
                continue
            group.samples = task.result()
            self.breaker.healthy(group.trips_at_start)
            self.stats["finished"] += 1
            if self.keep_group is not None and not self.keep_group(group):
                self.stats["filtered"] += 1
                self.admitted -= 1  # a filtered group is replaced by a new prompt
                continue
            self._ready.append(group)
        self._ready_event.set()
