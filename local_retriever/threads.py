"""CPU threads for the server's two stages, which run at the same time: the encoder (torch) and the
index search (FAISS, OpenBLAS). A stage that runs alone uses every core; while both run, each uses its
own share instead of both asking for all of them: OpenMP workers spin while they wait, so two teams
each as large as the machine make each other several times slower."""

from __future__ import annotations

import os


def split_threads(total: int | None = None) -> tuple[int, int]:
    """(encoder threads, search threads) out of `total` (default: every core). Query encoding is the
    larger cost per query; a flat search is bound by memory bandwidth and gains little from more threads."""
    total = max(1, total or os.cpu_count() or 1)
    if total == 1:
        return 1, 1
    search = max(1, total // 4)
    return total - search, search


def use_encoder_threads(n: int) -> None:
    """torch's thread count for the calling thread (its OpenMP and MKL settings are per thread)."""
    import torch

    torch.set_num_threads(n)


def use_search_threads(n: int) -> None:
    """FAISS's OpenMP (and its OpenBLAS) thread count for the calling thread."""
    import faiss

    faiss.omp_set_num_threads(n)


class StageThreads:
    """Called before each batch of one stage, on that stage's thread: `alone` threads when the other stage
    is idle, `shared` when both may run; the count is set only when it changes."""

    def __init__(self, use, alone: int, shared: int):
        self.use, self.alone, self.shared = use, alone, shared
        self.current: int | None = None

    def __call__(self, other_busy: bool) -> None:
        n = self.shared if other_busy else self.alone
        if n != self.current:
            self.use(n)
            self.current = n


def stage_threads(total: int | None = None) -> tuple[StageThreads, StageThreads]:
    """Thread setters for the encoder stage and the search stage of `MicroBatcher`, out of `total` threads."""
    total = max(1, total or os.cpu_count() or 1)
    encoder, search = split_threads(total)
    return StageThreads(use_encoder_threads, total, encoder), StageThreads(use_search_threads, total, search)
