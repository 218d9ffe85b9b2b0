"""Keep a long-running server's resident memory near what it holds, under glibc's allocator.

glibc gives each thread that allocates under contention an arena of its own (up to 8 per core), and keeps the freed
memory of each arena for reuse. The server's request threads, the encoder's and FAISS's thread teams all allocate
batch-sized buffers, so after bursts of large batches the process holds tens of MB per arena that nothing uses, and
its RSS climbs in steps long after the live set stopped growing. Two arenas are enough for a server whose heavy work
runs on two stage threads; trimming after traffic hands the freed pages back. Elsewhere than glibc both are no-ops.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util

M_ARENA_MAX = -8  # mallopt parameter (malloc.h)


def _libc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _libc()


def limit_arenas(n: int = 2) -> bool:
    """At most `n` malloc arenas from now on (arenas already made stay); whether the allocator took it."""
    return bool(_LIBC and _LIBC.mallopt(M_ARENA_MAX, n) == 1)


def trim() -> bool:
    """Return freed memory of every arena to the system; whether any was returned."""
    return bool(_LIBC and _LIBC.malloc_trim(0))


async def trim_after_traffic(served, every: float = 2.0) -> None:
    """Trim every `every` seconds in which `served()` (a count of requests) moved; runs until cancelled."""
    last = served()
    while True:
        await asyncio.sleep(every)
        now = served()
        if now != last:
            last = now
            with contextlib.suppress(Exception):
                await asyncio.to_thread(trim)
