"""Rate-limited warnings: one record per key per interval, with a count of the ones held back.

A rollout runs thousands of trajectories; when a search backend goes down, every tool call fails the same way and an
unthrottled WARNING per call buries everything else. `throttled(name)` returns the module's logger with a
`ThrottleFilter` on it. A record's key is its `throttle_key` extra when given (e.g. a URL, or a tool and an error
type), else its logger, level and message template; the first record of a key passes, the next ones within
`interval` seconds are dropped and counted, and the next one to pass says how many were dropped.

It lives in `local_retriever`, the bottom layer, so the endpoint client and the agent can both use it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

DEFAULT_INTERVAL = 60.0


class ThrottleFilter(logging.Filter):
    """Passes the first record of each key per `interval` seconds; `suppressed` counts every record dropped."""

    def __init__(
        self, interval: float = DEFAULT_INTERVAL, clock: Callable[[], float] = time.monotonic, max_keys: int = 4096
    ):
        super().__init__()
        if interval < 0:
            raise ValueError(f"interval must be >= 0 seconds, got {interval}")
        self.interval, self.clock, self.max_keys = interval, clock, max_keys
        self.suppressed = 0
        self._last: OrderedDict[Hashable, list] = OrderedDict()  # key -> [time it last passed, dropped since]
        self._lock = threading.Lock()  # records come from the event loop and from worker threads

    @staticmethod
    def key(record: logging.LogRecord) -> Hashable:
        key = getattr(record, "throttle_key", None)
        return (record.name, record.levelno, record.msg) if key is None else (record.name, key)

    def filter(self, record: logging.LogRecord) -> bool:
        key, now = self.key(record), self.clock()
        with self._lock:
            entry = self._last.get(key)
            if entry is not None and now - entry[0] < self.interval:
                entry[1] += 1
                self.suppressed += 1
                return False
            dropped = entry[1] if entry is not None else 0
            self._last[key] = [now, 0]
            self._last.move_to_end(key)
            while len(self._last) > self.max_keys:  # bounded: keys may carry model-written text
                self._last.popitem(last=False)
        record.throttle_dropped = dropped
        if dropped:
            # No percent sign in the added text: the message is %-formatted with the record's args later.
            record.msg = f"{record.msg} ({dropped} more like it since the last one shown)"
        return True


def throttled(name: str, interval: float = DEFAULT_INTERVAL) -> logging.Logger:
    """`logging.getLogger(name)` with one ThrottleFilter on it (added once, however often this is called)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, ThrottleFilter) for f in logger.filters):
        logger.addFilter(ThrottleFilter(interval))
    return logger
