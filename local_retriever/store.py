"""Passage rows on disk, read by byte offset.

The corpus file stays on disk; only an array of offsets (8 bytes a passage, memory-mapped) is
needed to fetch row i, so memory does not grow with the corpus. `os.pread` keeps reads
thread-safe without a lock.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import orjson

from .corpus import normalise_row

OFFSETS_FILE = "offsets.u64"


class OffsetWriter:
    """Appends (offset, length) pairs to a raw uint64 file while the corpus streams by."""

    def __init__(self, path: Path, flush_every: int = 65536):
        self._fh = open(path, "wb")
        self._buf: list[int] = []
        self._flush_every = flush_every
        self.count = 0

    def add(self, offset: int, length: int) -> None:
        self._buf += (offset, length)
        self.count += 1
        if len(self._buf) >= 2 * self._flush_every:
            self._flush()

    def _flush(self) -> None:
        self._fh.write(np.asarray(self._buf, dtype="<u8").tobytes())
        self._buf.clear()

    def close(self) -> None:
        self._flush()
        self._fh.close()


class PassageStore:
    """Row i of the knowledge base = the corpus line at offsets[i]; FAISS/BM25 ids are row positions."""

    def __init__(self, corpus_path: Path, offsets_path: Path):
        self.corpus_path = Path(corpus_path)
        spans = np.memmap(offsets_path, dtype="<u8", mode="r") if os.path.getsize(offsets_path) else np.zeros(0, "<u8")
        self._spans = spans.reshape(-1, 2)
        self._fd = os.open(self.corpus_path, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self._spans)

    def raw(self, i: int) -> bytes:
        if not 0 <= i < len(self._spans):
            raise IndexError(f"passage {i} out of range (corpus has {len(self._spans)})")
        offset, length = self._spans[i]
        return os.pread(self._fd, int(length), int(offset))

    def get(self, i: int) -> dict:
        return normalise_row(orjson.loads(self.raw(i)))

    def texts(self, start: int = 0, stop: int | None = None, field: str = "contents"):
        """Streams one field of rows [start, stop) in order, e.g. for encoding or BM25 indexing."""
        stop = len(self) if stop is None else min(stop, len(self))
        for i in range(start, stop):
            yield self.get(i)[field]

    def close(self) -> None:
        os.close(self._fd)
