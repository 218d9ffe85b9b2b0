"""The lower bounds of benchmarks/streaming_speedup.py, worked by hand on a four-group workload, and the simulated
streaming scheduler never finishing sooner than the bound its staleness rule sets."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from types import SimpleNamespace

from benchmarks import scheduler_sim
from benchmarks.streaming_speedup import bounds, lower_bound, pareto_workload, staleness_bound

ROOT = Path(__file__).resolve().parent.parent

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


def test_a_bound_row_is_the_larger_of_the_two():
    # one slot, 0.5 s updates: 10 s of turns and the last update (10.5 s) outlast the staleness rule's 2 x 1.5 + 5
    # + 0.5 = 8.5 s, and a scheduler under that rule cannot beat the plain bound either
    assert bounds(ARGS, workload(), capacity=1, train_s=0.5) == {"lower bound": 10.5, "lower bound at eta": 10.5}
    assert bounds(ARGS, workload(), capacity=2, train_s=2.0) == {"lower bound": 8.0, "lower bound at eta": 13.0}


def test_the_simulated_episode_is_the_one_the_real_chain_ran():
    """The simulator's trajectories against the real chain's stored runs (benchmarks/results): the same turns at
    32 turns; at 128 the same but for the longest trajectory, which the tiny model's positions cut short there."""
    saved = json.loads((ROOT / "benchmarks" / "results" / "streaming_speedup.json").read_text())
    args = SimpleNamespace(**saved["args"])
    for workload_name, max_turns in (("32 turns", 32), ("128 turns", 128)):
        real = saved["reals"][f"{workload_name} / capacity"]["streaming"][0]
        real_turns, real_longest = round(real["turns_mean"] * real["trained"]), real["turns_max"]
        data = pareto_workload(args, max_turns)
        turns = [len(t) for g in data for t in g]
        assert len(turns) == real["trained"]
        if max_turns == 32:
            assert (sum(turns), max(turns)) == (real_turns, real_longest) == (1249, 30)
        else:  # one trajectory of 126 turns ran 120 calls
            assert (sum(turns) - real_turns, max(turns) - real_longest) == (6, 6)
