"""A circuit breaker over the tool endpoints, for the streaming scheduler (framework-free).

A trajectory whose tool call failed for the infrastructure's sake (a KB with no replica left after the client's
retries, Serper or Jina answering 429/5xx, a timeout) says nothing about the policy: its group is discarded and
its prompt runs again. While the endpoints are down, admitting new groups would only make more such trajectories,
so the first failure opens the breaker and admission pauses. The breaker then asks the endpoints directly
(`probe`, e.g. a real `/retrieve` request to each KB server) with a backoff; when one answers, it closes and
admission resumes, re-run groups first. Without a probe (the web backend, where every request is a paid call) it
closes half-way after the backoff and lets work through: the next failure opens it again, with a longer backoff.

The outage lasts from the first failure until a group completes with no such failure. An outage longer than
`budget_s` ends the run with `OutageBudgetExceeded`, naming the last failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from .errors import OutageBudgetExceeded

log = logging.getLogger(__name__)

Probe = Callable[[], Awaitable[bool]]


class OutageBreaker:
    def __init__(
        self,
        budget_s: float,
        probe: Probe | None = None,
        backoff_s: float = 1.0,
        max_backoff_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.budget_s, self.probe, self.clock = budget_s, probe, clock
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.open = False
        self.outages = 0  # times the endpoints went down
        self.trips = 0  # failures seen: work started before the latest one says nothing about the endpoints now
        self._down_since: float | None = None
        self._down_total = 0.0
        self._last_error = ""
        self._backoff = backoff_s
        self._probing: asyncio.Task | None = None
        self._closed = asyncio.Event()
        self._closed.set()

    @property
    def outage_seconds(self) -> float:
        """Time spent in outages so far, the current one included."""
        return self._down_total + self._down_for()

    def trip(self, reason: str) -> None:
        """An infrastructure failure came back: pause admission and start asking the endpoints."""
        self._last_error = reason
        self.trips += 1
        if self._down_since is None:
            self._down_since = self.clock()
            self.outages += 1
            log.warning("tool endpoints failing (%s): admission paused, the group runs again when they answer", reason)
        self.check_budget()
        if not self.open:
            self.open = True
            self._closed.clear()
        if self._probing is None or self._probing.done():
            self._probing = asyncio.ensure_future(self._wait_for_endpoints())

    def healthy(self, trips_at_start: int) -> None:
        """A group completed without an infrastructure failure. It ends the outage only if it started after the
        latest failure (`trips` when it started): one that ran before it may not have needed the endpoints since."""
        if self._down_since is not None and trips_at_start == self.trips:
            lasted = self._down_for()
            self._down_total += lasted
            log.warning("tool endpoints answering again after %.1f s", lasted)
            self._down_since = None
            self._backoff = self.backoff_s

    def _down_for(self) -> float:
        """Seconds the current outage has lasted (0 when there is none)."""
        return 0.0 if self._down_since is None else self.clock() - self._down_since

    def check_budget(self) -> None:
        if self._down_for() > self.budget_s:
            raise OutageBudgetExceeded(
                f"tool endpoints unavailable for {self._down_for():.0f} s, longer than the outage "
                f"budget of {self.budget_s:g} s (scheduler.outage_budget_s); last failure: {self._last_error}"
            )

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def _wait_for_endpoints(self) -> None:
        while self.open:
            await asyncio.sleep(min(self._backoff, self.budget_s + 0.01))  # never sleep past the budget
            self._backoff = min(2 * self._backoff, self.max_backoff_s)
            if self.probe is None or await self._answers():
                self.open = False
                self._closed.set()
                return
            if self._down_for() > self.budget_s:
                self._closed.set()  # wake the scheduler: its next check raises
                return

    async def _answers(self) -> bool:
        try:
            return bool(await self.probe())
        except Exception as exc:  # a probe that fails is an endpoint still down
            self._last_error = f"{type(exc).__name__}: {exc}"
            return False

    async def aclose(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
            await asyncio.gather(self._probing, return_exceptions=True)
