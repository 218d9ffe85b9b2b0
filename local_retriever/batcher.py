"""Micro-batching: queries from concurrent requests are searched together.

One worker thread takes the first waiting request, then gathers whatever else arrives within
`max_wait_ms` (up to `max_batch` queries) and runs one encoder pass and one index search for all
of them. A batch lets FAISS and torch use every core; a lone query costs no more than
`max_wait_ms` extra. If a batch fails, each request in it is searched again on its own, so an
error reaches only the request that caused it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

SearchFn = Callable[[list[str], int], list[list[tuple[int, float]]]]


@dataclass
class _Job:
    queries: list[str]
    topk: int
    future: Future = field(default_factory=Future)


class MicroBatcher:
    def __init__(self, search: SearchFn, max_batch: int = 128, max_wait_ms: float = 5.0):
        self._search = search
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self.batches = 0
        self.queries = 0
        self.failed_batches = 0
        self._thread = threading.Thread(target=self._run, name="micro-batcher", daemon=True)
        self._thread.start()

    def submit(self, queries: list[str], topk: int) -> Future:
        job = _Job(queries, topk)
        self._jobs.put(job)
        return job.future

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            first = self._jobs.get()
            if first is None:
                return
            if not first.future.set_running_or_notify_cancel():
                continue  # its request was cancelled: a result could no longer be set
            batch, size = [first], len(first.queries)
            deadline = time.monotonic() + self.max_wait
            while size < self.max_batch:
                try:
                    job = self._jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    self._jobs.put(None)
                    break
                if not job.future.set_running_or_notify_cancel():
                    continue
                batch.append(job)
                size += len(job.queries)
            self._execute(batch)

    def _execute(self, batch: list[_Job]) -> None:
        queries = [q for job in batch for q in job.queries]
        try:
            hits = self._search(queries, max(job.topk for job in batch))
        except Exception as exc:  # noqa: BLE001 - never kills the worker
            if len(batch) == 1:
                batch[0].future.set_exception(exc)
                return
            # One bad request must not fail the others that happened to share its batch.
            self.failed_batches += 1
            for job in batch:
                self._execute([job])
            return
        self.batches += 1
        self.queries += len(queries)
        start = 0
        for job in batch:
            part = hits[start : start + len(job.queries)]
            start += len(job.queries)
            job.future.set_result([h[: job.topk] for h in part])
