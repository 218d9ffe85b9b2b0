"""Micro-batching: queries from concurrent requests are prepared and searched together.

Stage one takes every request waiting when it becomes free, up to `max_batch` queries, and prepares them
in one pass (encoder, BM25 tokenisation); stage two searches them as one batch and reads the rows. Nothing
waits for a batch to fill: a request that finds the server idle is prepared at once, and batches grow only
from requests that queued while earlier work was in flight, so a lone client pays no batching delay while
many clients get large batches.

Two ways to run the stages. `overlap=False` (serial): one thread prepares a batch, then searches it, each
stage with every core. `overlap=True`: stage two runs on its own thread and joins whatever stage one has
prepared since its last search, so batch k+1 is prepared while batch k is searched, each stage with its
share of the cores while both run. Overlap pays only when the stages gain little from more threads; on a
2-core machine, where the encoder and a Flat scan gain 1.3-1.9x from a second thread and a scan costs about
the same whatever the batch, serial is faster under load (see benchmarks/server_throughput.py).

In serial mode, requests that arrive while a batch is prepared are prepared next and join its search.

If a batch fails in either stage, each request in it is searched again on its own, so an error reaches
only the request that caused it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

Hits = list[list[tuple[int, float]]]


class Stages(Protocol):
    """What the batcher runs: `KnowledgeBase` implements it."""

    def prepare(self, queries: list[str]) -> Any: ...

    def join(self, parts: list[Any]) -> Any: ...

    def search_prepared(self, prepared: Any, topk: int) -> Hits: ...


@dataclass
class _Job:
    queries: list[str]
    topk: int
    future: Future = field(default_factory=Future)
    times: list[float] = field(default_factory=lambda: [time.perf_counter()])  # submitted, prepare start, end


@dataclass
class _Prepared:
    jobs: list[_Job]
    prepared: Any


class MicroBatcher:
    """`submit` returns a future of the hits of each query (row position, score), best first, or of
    `finish(hits)` of each query when `finish` is given (run on stage two's thread, e.g. to read rows).
    `stage_threads` (one per stage, each called on the thread that runs the stage before every batch) is told
    whether the other stage may run meanwhile, to size the stage's CPU threads: the whole machine alone, a share
    when both run (only with `overlap`)."""

    def __init__(
        self,
        stages: Stages,
        max_batch: int = 128,
        finish: Callable[[list[tuple[int, float]]], Any] | None = None,
        stage_threads: tuple[Callable[[bool], None] | None, Callable[[bool], None] | None] = (None, None),
        overlap: bool = False,
    ):
        self._stages = stages
        self.overlap = overlap
        self._stage_threads = stage_threads
        self.max_batch = max_batch
        self._finish = finish
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._ready: list[_Prepared | None] = []  # prepared, not yet searched; None = closing
        self._cond = threading.Condition()
        self._preparing = self._searching = False
        self.batches = 0  # index searches
        self.queries = 0
        self.prepare_batches = 0
        self.failed_batches = 0
        # Seconds summed over requests (where a request's time went) and over batches (how busy each stage was).
        self.timings = dict.fromkeys(
            ("requests", "queued_s", "prepare_s", "handover_s", "search_s", "prepare_busy_s", "search_busy_s"), 0.0
        )
        self._threads = [threading.Thread(target=self._stage_one, name="batcher-prepare", daemon=True)]
        if overlap:
            self._threads.append(threading.Thread(target=self._stage_two, name="batcher-search", daemon=True))
        for thread in self._threads:
            thread.start()

    def submit(self, queries: list[str], topk: int) -> Future:
        job = _Job(queries, topk)
        self._jobs.put(job)
        return job.future

    def close(self) -> None:
        self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=10)

    # --- stage one: prepare what waits, at once -------------------------------------------------------------

    def _stage_one(self) -> None:
        threads = self._stage_threads[0]
        while True:
            self._preparing = False
            first = self._jobs.get()  # blocks only while idle
            self._preparing = True
            batch, closing = self._take([first] if first is not None else [], closing=first is None)
            if batch:
                if threads is not None:
                    # An idle search stage stays idle until this batch is handed over: the encoder may take every core.
                    threads(self._searching)
                parts = self._prepare(batch)
                if self.overlap:
                    for part in parts:
                        self._hand_over(part)
                elif parts:
                    closing = self._search_serial(parts) or closing
            if closing:
                if self.overlap:
                    self._hand_over(None)
                return

    def _take(self, batch: list[_Job], closing: bool = False, room: int | None = None) -> tuple[list[_Job], bool]:
        """`batch` and the requests waiting now, up to `room` (default `max_batch`) queries; whether `close`
        was called."""
        size, room = sum(len(job.queries) for job in batch), self.max_batch if room is None else room
        while not closing and size < room:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                closing = True
                break
            batch.append(job)
            size += len(job.queries)
        return [job for job in batch if job.future.set_running_or_notify_cancel()], closing

    def _prepare(self, batch: list[_Job]) -> list[_Prepared]:
        """The batch prepared in one pass; if that fails, each request alone, so only a culprit fails."""
        start = time.perf_counter()
        try:
            prepared = self._stages.prepare([q for job in batch for q in job.queries])
        except Exception as exc:  # noqa: BLE001 - never kills the worker
            if len(batch) == 1:
                batch[0].future.set_exception(exc)
                return []
            self.failed_batches += 1
            return [part for job in batch for part in self._prepare([job])]
        end = time.perf_counter()
        self.timings["prepare_busy_s"] += end - start
        for job in batch:
            job.times[1:] = [start, end]
        return [_Prepared(batch, prepared)]

    def _search_serial(self, parts: list[_Prepared]) -> bool:
        """Search `parts` with every core, after preparing the requests that arrived meanwhile: they join this
        search instead of waiting for the next, since a scan costs about the same for any small batch (a Flat
        scan reads the whole index) while preparing costs by the query. Returns whether `close` was called."""
        size, closing = sum(len(job.queries) for part in parts for job in part.jobs), False
        while size < self.max_batch and not closing and not self._jobs.empty():
            late, closing = self._take([], closing, room=self.max_batch - size)
            if not late:
                break
            more = self._prepare(late)
            parts += more
            size += sum(len(job.queries) for part in more for job in part.jobs)
        self.prepare_batches += len(parts)
        if self._stage_threads[1] is not None:
            self._stage_threads[1](False)
        self._search(parts)
        return closing

    def _hand_over(self, item: _Prepared | None) -> None:
        with self._cond:
            self._ready.append(item)
            if item is not None:
                self.prepare_batches += 1  # counted once stage two can see it
            self._cond.notify()

    # --- stage two: search everything prepared since the last search as one batch ----------------------------

    def _stage_two(self) -> None:
        threads = self._stage_threads[1]
        while True:
            with self._cond:
                self._searching = False
                while not self._ready:
                    self._cond.wait()
                parts, self._ready = self._ready, []
                self._searching = True
            closing = parts[-1] is None
            parts = [p for p in parts if p is not None]
            if parts:
                if threads is not None:
                    threads(self._preparing or not self._jobs.empty())
                self._search(parts)
            if closing:
                return

    def _search(self, parts: list[_Prepared]) -> None:
        jobs = [job for part in parts for job in part.jobs]
        start = time.perf_counter()
        try:
            joined = self._stages.join([part.prepared for part in parts])
            hits = self._stages.search_prepared(joined, max(job.topk for job in jobs))
        except Exception as exc:  # noqa: BLE001 - never kills the worker
            if len(jobs) == 1:
                jobs[0].future.set_exception(exc)
                return
            self.failed_batches += 1
            for job in jobs:
                self._alone(job)
            return
        self.batches += 1
        self.queries += len(hits)
        offset = 0
        for job in jobs:
            part = hits[offset : offset + len(job.queries)]
            offset += len(job.queries)
            self._deliver(job, part)
        end = time.perf_counter()
        t = self.timings
        t["search_busy_s"] += end - start
        for job in jobs:
            submitted, began, prepared = job.times[:3]
            t["requests"] += 1
            t["queued_s"] += began - submitted
            t["prepare_s"] += prepared - began
            t["handover_s"] += start - prepared
            t["search_s"] += end - start  # search, row reads and answering every request of the batch

    def _alone(self, job: _Job) -> None:
        try:
            hits = self._stages.search_prepared(self._stages.prepare(job.queries), job.topk)
        except Exception as exc:  # noqa: BLE001
            job.future.set_exception(exc)
            return
        self._deliver(job, hits)

    def _deliver(self, job: _Job, hits: Hits) -> None:
        try:
            result = [h[: job.topk] for h in hits]
            if self._finish is not None:
                result = [self._finish(h) for h in result]
        except Exception as exc:  # noqa: BLE001 - e.g. a row that cannot be read fails its own request
            job.future.set_exception(exc)
            return
        job.future.set_result(result)
