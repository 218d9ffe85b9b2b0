"""A per-host rate limit for one process: requests to a host are spaced by 1 / rps seconds."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

MAX_HOSTS = 4096  # hosts are model-chosen: past this many, hosts whose slot has passed are forgotten


class HostRateLimiter:
    def __init__(self, rps: float):
        self.interval = 1.0 / rps
        self._next: dict[str, float] = defaultdict(float)
        self._lock = asyncio.Lock()

    async def wait(self, host: str) -> None:
        async with self._lock:
            now = time.monotonic()
            if len(self._next) >= MAX_HOSTS:
                self._next = defaultdict(float, {h: t for h, t in self._next.items() if t > now})
            slot = max(now, self._next[host])
            self._next[host] = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)
