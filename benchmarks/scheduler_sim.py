"""Rollout scheduling, simulated: batch-synchronous vs OpenRLHF async (batch-granular) vs streaming.

One command: `python benchmarks/scheduler_sim.py`. All three modes run the same seeded workload
on the same simulated fleet, in virtual time (aiotools.VirtualClock), so a run takes seconds:

- E engines, each decoding up to C sequences at once at `tok_s` seconds a token (continuous
  batching: a sequence holds a slot only while it decodes, not while its tool call runs);
- ASearcher-like trajectories: most need 2-10 turns, a tail 40-128, 30-300 tokens a turn,
  tool latency log-normal around 1.5 s; turns and tokens a turn are capped by a shipped recipe's
  `agent.max_turns` and `agent.max_new_tokens_per_turn` (`--recipe`, by default local_7b_long: 128 turns,
  1,024 tokens a turn, so the caps do not bind; with local_7b_1node's 32 turns the tail is cut to 32);
- a trainer step of `train_s` seconds after each batch of B groups, then a weight broadcast that
  pauses the engines for `sync_s` seconds.

(a) sync: generate a batch, train, broadcast, repeat. (b) OpenRLHF 0.11.2 async with partial
rollout: the next batch is generated while the trainer trains (queue size 1), but a batch is
handed over only when its slowest group is done. (c) ours: `StreamingScheduler` keeps groups in
flight across steps, bounded by the staleness eta, (c) keeping every running group (AReaL's
semantics, the default) or (d) restarting a group that falls more than eta versions behind once,
then dropping it. Every mode runs the same steps x B groups to the end (a drained run: the
streaming modes stop admitting when the data ends and consume everything admitted), so the share
of long trajectories consumed compares like with like.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from asearcher_plugin.recipe import Recipe  # noqa: E402
from asearcher_plugin.scheduler.core import StreamingScheduler  # noqa: E402
from benchmarks.readme_table import publish  # noqa: E402


@dataclass
class Fleet:
    """E engines, each decoding every sequence sent to it at `tok_s` seconds a token while at most `slots` decode at
    once, and at slots / n of that speed when n do (a saturated engine's token rate is shared; `slots=None`: no
    limit, the flat model). A weight broadcast pauses every engine."""

    engines: int
    slots: int | None
    tok_s: float
    now: callable = None
    running: asyncio.Event = field(default_factory=asyncio.Event)
    active: list = field(default_factory=list)
    load: list = field(default_factory=list)
    timeline: list = field(default_factory=list)  # (time, engine, active sequences)
    pauses: list = field(default_factory=list)  # (start, end) of weight broadcasts

    def __post_init__(self):
        self.running.set()
        self.active = [0] * self.engines
        self.load = [0] * self.engines

    def pick(self, n: int) -> int:
        """OpenRLHF's assignment: the engine with the least outstanding work gets the whole group."""
        e = min(range(self.engines), key=lambda i: self.load[i])
        self.load[e] += n
        return e

    def slowdown(self, e: int) -> float:
        return 1.0 if self.slots is None else max(1.0, self.active[e] / self.slots)

    async def decode(self, e: int, tokens: float) -> None:
        """`tokens` of decode on engine e (a fraction of a token is a share of one token's time)."""
        self._mark(e, +1)
        try:
            left = tokens
            while left > 1e-9:
                await self.running.wait()  # a weight broadcast pauses decoding
                chunk = min(left, 32)
                await asyncio.sleep(chunk * self.tok_s * self.slowdown(e))
                left -= chunk
        finally:
            self._mark(e, -1)

    def _mark(self, e: int, delta: int) -> None:
        self.active[e] += delta
        self.timeline.append((self.now(), e, self.active[e]))

    async def broadcast(self, seconds: float) -> None:
        start = self.now()
        self.running.clear()
        await asyncio.sleep(seconds)
        self.running.set()
        self.pauses.append((start, self.now()))


LONG_TURNS = 40  # the workload's long tail: 40-128 turns


def workload(seed: int, prompts: int, n: int, max_turns: int, max_tokens: int) -> list[list[list[tuple[int, float]]]]:
    """Drawn the same whatever the caps, then cut to the recipe's turn and token limits."""
    rng = random.Random(seed)
    out = []
    for _ in range(prompts):
        group = []
        for _ in range(n):
            turns = rng.randint(LONG_TURNS, 128) if rng.random() < 0.12 else rng.randint(2, 10)
            calls = [(rng.randint(30, 300), min(10.0, rng.lognormvariate(0.2, 0.6))) for _ in range(turns)]
            group.append([(min(tokens, max_tokens), tool_s) for tokens, tool_s in calls[:max_turns]])
        out.append(group)
    return out


async def run_group(fleet: Fleet, group) -> list:
    e = fleet.pick(len(group))

    async def trajectory(turns):
        for tokens, tool_s in turns:
            await fleet.decode(e, tokens)
            await asyncio.sleep(tool_s)
        return len(turns)

    try:
        return await asyncio.gather(*(trajectory(t) for t in group))
    finally:
        fleet.load[e] -= len(group)


async def mode_sync(fleet, data, args, log):
    for step in range(args.steps):
        batch = data[step * args.batch : (step + 1) * args.batch]
        await asyncio.gather(*(run_group(fleet, g) for g in batch))
        log.append({"t": fleet.now(), "staleness": [0] * len(batch), "turns": [len(t) for g in batch for t in g]})
        await asyncio.sleep(args.train_s)
        await fleet.broadcast(args.sync_s)


async def mode_openrlhf(
    fleet, data, args, log, generate_batch: int | None = None, queue_size: int = 1, partial: bool = True
):
    """OpenRLHF 0.11.2's async trainer (`ppo_trainer_async.py`, `samples_generator.py`): `queue_size` slot tokens
    (`train.async_queue_size`) let the generator run that many batches ahead of the trainer, which returns a token as
    it takes a batch; a generate call sends `generate_batch` groups (`rollout.vllm_generate_batch_size`, default B)
    and waits for all of them, and the batches beyond the first wait in a buffer, one per slot token. Without
    partial rollout a lock keeps a weight broadcast out of a generate call (and the call out of the broadcast);
    with it the broadcast pauses the engines mid-call. A group's staleness: the trainer's version when it trains
    the group minus the version when its generate call began."""
    generate_batch = generate_batch or args.batch
    queue, slots, lock = asyncio.Queue(maxsize=queue_size), asyncio.Queue(), asyncio.Lock()
    for _ in range(queue_size):
        slots.put_nowait(0)
    version = {"v": 0}
    steps = len(data) // args.batch

    async def generator():
        buffer, next_prompt = [], 0
        for _ in range(steps):
            await slots.get()
            if len(buffer) < args.batch and next_prompt < len(data):
                groups = data[next_prompt : next_prompt + generate_batch]
                next_prompt += len(groups)
                async with lock if not partial else contextlib.nullcontext():
                    started = version["v"]
                    await asyncio.gather(*(run_group(fleet, g) for g in groups))
                buffer += [(g, started) for g in groups]
            batch, buffer = buffer[: args.batch], buffer[args.batch :]
            await queue.put(batch)

    gen = asyncio.ensure_future(generator())
    for _ in range(steps):
        batch = await queue.get()
        slots.put_nowait(version["v"])
        log.append(
            {
                "t": fleet.now(),
                "staleness": [version["v"] - started for _, started in batch],
                "turns": [len(t) for g, _ in batch for t in g],
            }
        )
        await asyncio.sleep(args.train_s)
        async with lock:
            await fleet.broadcast(args.sync_s)
        version["v"] += 1
    await gen


async def mode_streaming(fleet, data, args, log, eta: int, on_stale: str):
    sched = StreamingScheduler(
        lambda g: run_group(fleet, g),
        iter(data),
        batch_size=args.batch,
        max_concurrent=args.max_concurrent or (eta + 1) * args.batch,
        max_staleness=eta,
        on_stale=on_stale,
    )
    step = 0
    while True:
        try:
            batch = await sched.next_batch()
        except EOFError:
            break
        log.append(
            {
                "t": fleet.now(),
                "staleness": [sched.version - g.admitted_version for g in batch],
                "turns": [t for g in batch for t in g.samples],
            }
        )
        await asyncio.sleep(args.train_s)
        await fleet.broadcast(args.sync_s)
        step += 1
        sched.set_version(step)
    await sched.aclose()
    return sched.stats


def run_mode(mode, data, args):
    from aiotools import VirtualClock

    async def main():
        clock = VirtualClock()
        with clock.patch_loop():
            fleet = Fleet(args.engines, args.slots, args.tok_s, now=clock.virtual_time)
            log: list = []
            extra = await mode(fleet, data, args, log)
            return fleet, log, extra, clock.virtual_time()

    fleet, log, extra, end = asyncio.run(main())
    end = log[-1]["t"] + args.train_s + args.sync_s
    turns = [t for x in log for t in x["turns"]]
    trajectories = len(turns)
    idle = idle_fraction(fleet.timeline, fleet.pauses, args.engines, end)
    staleness = [s for x in log for s in x["staleness"]]
    return {
        "seconds": end,
        "trajectories": trajectories,
        "traj_per_s": trajectories / end,
        "engine_idle": idle,
        "staleness_max": max(staleness),
        "staleness_mean": float(np.mean(staleness)),
        "staleness_hist": np.bincount(staleness).tolist(),
        "timeline": fleet.timeline,
        "stats": extra,
        "long_share": float(np.mean([t >= LONG_TURNS for t in turns])),
        "mean_turns": float(np.mean(turns)),
    }


def idle_fraction(timeline, pauses, engines: int, end: float) -> float:
    """Share of engine-time with no sequence decoding; time paused for a weight broadcast counts as idle."""
    idle = 0.0
    for e in range(engines):
        busy, last_t, last_a = [], 0.0, 0
        for t, k, a in timeline:
            if k != e:
                continue
            if last_a > 0:
                busy.append((last_t, min(t, end)))
            last_t, last_a = t, a
        if last_a > 0:
            busy.append((last_t, end))
        busy_time = sum(b - a for a, b in busy)
        paused_busy = sum(max(0.0, min(b, pe) - max(a, ps)) for a, b in busy for ps, pe in pauses)
        idle += end - (busy_time - paused_busy)
    return idle / (engines * end)


def plot(results: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in results if n.startswith(("(a)", "(c)"))][:2]
    fig, axes = plt.subplots(len(names), 1, figsize=(11, 2.2 * len(names)), sharex=True)
    horizon = min(results[n]["seconds"] for n in names)
    for ax, name in zip(axes, names):
        for e in range(args.engines):
            events = [(t, a) for t, k, a in results[name]["timeline"] if k == e]
            ts = [0.0] + [t for t, _ in events]
            busy = [0] + [a for _, a in events]
            base = e * 1.15
            ax.fill_between(
                ts, base, np.minimum(np.array(busy) / args.slots, 1.0) + base, step="post", lw=0, alpha=0.8
            )
            ax.axhline(base, color="black", lw=0.3)
        ax.set_yticks([e * 1.15 + 0.5 for e in range(args.engines)], [f"engine {e}" for e in range(args.engines)])
        ax.set_title(f"{name}: slot occupancy per engine (idle {results[name]['engine_idle']:.0%})", fontsize=9)
        ax.set_xlim(0, horizon)
    axes[-1].set_xlabel("simulated seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument(
        "--slots", type=int, default=32, help="sequences an engine decodes at full speed at once; beyond, each slows"
    )
    ap.add_argument("--tok-s", type=float, default=0.02, help="seconds per decoded token")
    ap.add_argument("--batch", type=int, default=16, help="prompt groups per training step (B)")
    ap.add_argument("--n", type=int, default=4, help="trajectories per prompt")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--train-s", type=float, default=60.0)
    ap.add_argument("--sync-s", type=float, default=5.0)
    ap.add_argument("--eta", type=int, nargs="+", default=[4], help="staleness bounds of the streaming scheduler")
    ap.add_argument(
        "--max-concurrent", type=int, default=None, help="groups in flight (streaming); default (eta+1) x B"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--recipe", default="local_7b_long", help="the shipped recipe whose turn and token limits apply")
    args = ap.parse_args()
    agent = Recipe.load(args.recipe).agent
    args.max_turns, args.max_tokens_per_turn = agent.max_turns, agent.max_new_tokens_per_turn
    data = workload(args.seed, args.batch * args.steps, args.n, args.max_turns, args.max_tokens_per_turn)
    workload_long = float(np.mean([len(t) >= LONG_TURNS for g in data for t in g]))
    modes = {"(a) batch-synchronous": mode_sync, "(b) OpenRLHF async + partial rollout": mode_openrlhf}
    for eta in args.eta:
        modes[f"(c) streaming (ours), keep, eta={eta}"] = partial(mode_streaming, eta=eta, on_stale="keep")
        modes[f"(d) streaming (ours), restart, eta={eta}"] = partial(mode_streaming, eta=eta, on_stale="restart")
    results = {name: run_mode(fn, data, args) for name, fn in modes.items()}
    base_a, base_b = (
        results["(a) batch-synchronous"]["traj_per_s"],
        results["(b) OpenRLHF async + partial rollout"]["traj_per_s"],
    )
    rows = []
    for name, r in results.items():
        rows.append(
            [
                name,
                f"{r['traj_per_s']:.3f}",
                f"{r['traj_per_s'] / base_a:.2f}x",
                f"{r['traj_per_s'] / base_b:.2f}x",
                f"{r['engine_idle']:.1%}",
                r["staleness_max"],
                f"{r['staleness_mean']:.2f}",
                f"{r['long_share']:.1%}",
                f"{r['long_share'] / workload_long:.0%}" if workload_long else "–",  # a recipe cut the tail
                r["stats"].get("stale_dropped", 0) if r["stats"] else 0,
                f"{r['seconds']:.0f}",
            ]
        )
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    plot(results, args, out / "scheduler_timeline.png")
    note = (
        f"simulated, virtual time: {args.engines} engines x {args.slots} slots, {args.tok_s * 1000:.0f} ms/token, "
        f"B={args.batch} groups of n={args.n}, {args.steps} steps drained to the end, trainer step "
        f"{args.train_s:.0f} s + {args.sync_s:.0f} s weight sync; streaming: (eta + 1) x B groups may be in flight. "
        f"Workload: 2-10 turns, 12% 40-128, 30-300 tokens a turn, capped by the {args.recipe} recipe "
        f"({args.max_turns} turns, {args.max_tokens_per_turn} tokens a turn). "
        "Staleness = policy versions between a group's admission and the update that uses it. "
        f'Long share = consumed trajectories of {LONG_TURNS}+ turns; "of workload" compares it with the '
        f"{workload_long:.1%} the workload has. Keep (the default) never stops a running group, so it consumes "
        "the whole tail, a few versions late (reported as staleness, corrected by IS weights); restart bounds "
        "staleness by eta and pays with the long trajectories it restarts and drops. "
        "Timelines: benchmarks/results/scheduler_timeline.png"
    )
    payload = {
        "args": vars(args),
        "results": {k: {kk: vv for kk, vv in v.items() if kk != "timeline"} for k, v in results.items()},
    }
    print(
        publish(
            "scheduler_sim",
            [
                "mode",
                "trajectories/s",
                "vs (a)",
                "vs (b)",
                "engine idle",
                "max staleness",
                "mean staleness",
                "long share",
                "of workload",
                "groups dropped",
                "simulated s",
            ],
            rows,
            note,
            payload,
        )
    )


if __name__ == "__main__":
    main()
