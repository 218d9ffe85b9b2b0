"""The KB server's allocator settings (local_retriever/memory.py); the soak test in test_faults.py measures them."""

from __future__ import annotations

import asyncio

from local_retriever import memory


def test_the_server_trims_after_traffic_and_never_while_idle(monkeypatch):
    trims: list[int] = []
    counts = iter([0, 0, 5, 5, 5, 9])  # requests served: at the start, then at each tick

    async def run():
        seen = []

        def served():
            seen.append(next(counts))
            return seen[-1]

        monkeypatch.setattr(memory, "trim", lambda: trims.append(seen[-1]) or True)
        task = asyncio.create_task(memory.trim_after_traffic(served, every=0.001))
        while len(seen) < 6:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # the last tick's trim runs in a thread
        task.cancel()

    asyncio.run(run())
    assert trims == [5, 9]  # after the ticks in which the count moved, and only then


def test_arenas_and_trim_take_effect_under_glibc():
    import platform

    if platform.libc_ver()[0] != "glibc":
        assert memory.limit_arenas(2) is False and memory.trim() is False
        return
    assert memory.limit_arenas(2) is True
    assert isinstance(memory.trim(), bool)
