"""The lower bounds of benchmarks/streaming_speedup.py, worked by hand on a four-group workload, and the simulated
streaming scheduler never finishing sooner than the bound its staleness rule sets."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

from benchmarks import scheduler_sim
from benchmarks.streaming_speedup import lower_bound, staleness_bound

# B = 1, eta = 1, a turn 1 s at full speed, a version 2 s of training + 1 s of broadcast
ARGS = SimpleNamespace(batch=1, eta=1, turn_s=1.0, sim_turn_overhead_s=0.0, sim_sync_s=1.0, engines=1)
TURNS = [3, 1, 1, 5]  # one trajectory a group


def workload(tok_s: float = 0.01) -> list:
    return [[[(ARGS.turn_s / tok_s, 0.0)] * n] for n in TURNS]


def test_staleness_bound_by_hand():
    # group 3 may enter at version 3 // 1 - 1 = 2, reached after 2 x (2 + 1) s; then 5 turns, then its update
    assert staleness_bound(ARGS, workload(), train_s=2.0) == 2 * 3 + 5 + 2


def test_lower_bound_by_hand():
    # 10 turns on 1 engine x 2 slots = 5 s, then an update: 7 s; the 5-turn trajectory and its update: 7 s;
    # four updates back to back: 8 s
    assert lower_bound(ARGS, workload(), capacity=2, train_s=2.0) == 8.0
    # one slot: 10 s of turns, then the update that trains the last
    assert lower_bound(ARGS, workload(), capacity=1, train_s=0.5) == 10.5


def test_simulated_streaming_respects_its_bound():
    data = workload()
    sim = SimpleNamespace(
        engines=1, slots=2, tok_s=0.01, batch=1, n=1, steps=4, train_s=2.0, sync_s=1.0, max_concurrent=None
    )
    run = scheduler_sim.run_mode(partial(scheduler_sim.mode_streaming, eta=1, on_stale="keep"), data, sim)
    assert run["seconds"] >= staleness_bound(ARGS, data, train_s=2.0) - 1e-6
