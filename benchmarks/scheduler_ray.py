"""Batch-synchronous vs streaming rollout with real engines: HFEngine actors on Ray, CPU, tiny model.

One command: `python benchmarks/scheduler_ray.py`. Starts a KB server on the bundled sample, two
CPU engine actors, and runs the same prompts both ways; a trainer step is a fixed sleep (no
training on CPU). Batch-synchronous: dispatch B groups, wait for all, "train". Streaming: the
scheduler keeps groups in flight while the trainer trains. Engine idle = share of polls (every
0.1 s) at which an engine had no request in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402


async def poll_idle(actors, stop: asyncio.Event, samples: list) -> None:
    while not stop.is_set():
        counts = await asyncio.gather(*(a.get_num_unfinished_requests.remote() for a in actors))
        samples.extend(c == 0 for c in counts)
        await asyncio.sleep(0.1)


async def run(mode: str, actors, prompts, args, params) -> dict:
    from asearcher_plugin.commands.rollout import group_runner
    from asearcher_plugin.scheduler import StreamingScheduler

    run_group = group_runner(actors, params, args.max_len, args.n)
    stop, idle = asyncio.Event(), []
    poller = asyncio.ensure_future(poll_idle(actors, stop, idle))
    start, done, staleness = time.monotonic(), 0, []
    if mode == "batch-synchronous":
        for step in range(args.steps):
            batch = prompts[step * args.batch : (step + 1) * args.batch]
            groups = await asyncio.gather(*(run_group(p) for p in batch))
            done += sum(len(g) for g in groups)
            staleness += [0] * len(groups)
            await asyncio.sleep(args.train_s)
    else:
        sched = StreamingScheduler(
            run_group, iter(prompts), batch_size=args.batch, max_concurrent=args.max_concurrent, max_staleness=args.eta
        )
        for step in range(args.steps):
            batch = await sched.next_batch()
            done += sum(len(g.samples) for g in batch)
            staleness += [step - g.admitted_version for g in batch]
            await asyncio.sleep(args.train_s)
            sched.set_version(step + 1)
        await sched.aclose()
    seconds = time.monotonic() - start
    stop.set()
    await poller
    return {
        "trajectories": done,
        "seconds": seconds,
        "traj_per_s": done / seconds,
        "engine_idle": sum(idle) / max(1, len(idle)),
        "max_staleness": max(staleness),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--train-s", type=float, default=1.0)
    ap.add_argument("--eta", type=int, default=1)
    ap.add_argument("--max-concurrent", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=1024)
    args = ap.parse_args()

    import ray

    from asearcher_plugin.commands.rollout import _actor_class
    from asearcher_plugin.engines.tiny_model import ensure_tiny_model
    from asearcher_plugin.engines.types import SamplingParams
    from local_retriever.build import ensure_sample_kb
    from local_retriever.sample import load_sample_questions
    from local_retriever.server_process import start_server, wait_healthy

    kb, model = ensure_sample_kb(Path("runs/sample-kb")), ensure_tiny_model("runs/tiny-model")
    server = start_server(kb, 5121, "bm25")
    wait_healthy("http://127.0.0.1:5121", server)
    ray.init(num_cpus=args.engines, include_dashboard=False, log_to_driver=False)
    try:
        agent = {
            "agent_type": "asearcher",
            "max_turns": args.max_turns,
            "max_new_tokens_per_turn": 48,
            "tools": {"local": {"urls": ["http://127.0.0.1:5121"]}},
        }
        actors = [_actor_class().remote(str(model), agent, seed=i) for i in range(args.engines)]
        ray.get([a.get_num_unfinished_requests.remote() for a in actors])  # models loaded
        prompts = [(q["question"], q["golden_answers"]) for q in load_sample_questions()]
        params = SamplingParams(temperature=1.0, max_tokens=None, logprobs=1)
        results = {
            mode: asyncio.run(run(mode, actors, prompts, args, params)) for mode in ("batch-synchronous", "streaming")
        }
    finally:
        ray.shutdown()
        server.terminate()
    base = results["batch-synchronous"]["traj_per_s"]
    rows = [
        [
            m,
            f"{r['traj_per_s']:.3f}",
            f"{r['traj_per_s'] / base:.2f}x",
            f"{r['engine_idle']:.0%}",
            r["max_staleness"],
            f"{r['seconds']:.0f}",
        ]
        for m, r in results.items()
    ]
    note = (
        f"real HFEngine actors on Ray (CPU), tiny random Qwen2 model, sample KB over HTTP: {args.engines} engines, "
        f"B={args.batch} groups of n={args.n}, {args.steps} steps, a {args.train_s:.0f} s sleep standing in for each "
        f"trainer step, eta={args.eta}. The tiny model runs every trajectory to {args.max_turns} turns, so lengths "
        "barely differ: the gain here is generation overlapping the trainer step, not straggler hiding"
    )
    print(
        publish(
            "scheduler_ray",
            ["mode", "trajectories/s", "vs batch-sync", "engine idle", "max staleness", "seconds"],
            rows,
            note,
            {"args": vars(args), "results": results},
        )
    )


if __name__ == "__main__":
    main()
