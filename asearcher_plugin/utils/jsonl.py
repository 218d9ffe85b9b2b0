"""Append-only JSONL files that survive a crash mid-write."""

from __future__ import annotations

import os
from pathlib import Path


def drop_cut_tail(path: Path) -> None:
    """Cuts off a last line left without its newline by a crash mid-write.

    Appending after it would merge the next row into it, losing both; the cut row was never
    complete, so what it recorded is simply done again.
    """
    if not path.is_file():
        return
    with open(path, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        end = size
        while end > 0:
            start = max(0, end - 65536)
            fh.seek(start)
            chunk = fh.read(end - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                fh.truncate(start + nl + 1)
                return
            end = start
        fh.truncate(0)
