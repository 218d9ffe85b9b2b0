"""Streaming against OpenRLHF's own knobs, swept, under an engine that saturates; repeated runs on the real chain.

One command: `python benchmarks/streaming_speedup.py`. For each workload (the local recipes' 32 turns, the long-horizon
recipe's 128) and each engine cost model (flat; capacity, see below):

1. **Sweep, simulated** (benchmarks/scheduler_sim.py's fleet, in virtual time, seconds per configuration): every
   OpenRLHF configuration (`train.async_queue_size` 1, 2, 4 x `rollout.vllm_generate_batch_size` from B to all
   prompts of the episode x partial rollout on / off), with OpenRLHF 0.11.2's generate-batch, slot-token and lock
   semantics, and the streaming scheduler (at `--eta`, and at the looser bounds of `--sim-etas`), on the real
   chain's workload and timings. The best OpenRLHF configuration is the one with the highest simulated throughput,
   whatever its staleness (reported beside it).
2. **Real chain** (benchmarks/openrlhf_cpu.py's `run_mode`: `asearcher train cpu_tiny --cpu`, OpenRLHF's `train()`,
   real vLLM engines, OpenRLHF's DeepSpeed actor, our agent on the sample KB): streaming and that best OpenRLHF
   configuration, `--repeats` fresh runs each, alternating; a finished run is reused only when the commit and its
   arguments match.
3. **Bounds and run length, simulated**: two lower bounds per workload and cost model (no scheduler finishes
   sooner; none that admits prompts in order under the staleness rule does), and a second table of the capacity
   model over longer runs (`--sim-prompts`), where the end-of-run drain weighs less and a generate call of all the
   prompts grows staler.

Engine cost models (asearcher_plugin/openrlhf/cpu/workload.py `FullSizeDecode`; the simulator's `Fleet` is the same
model): each turn stands for a full-size model's decode of `--turn-s` seconds. *Flat*: that time whatever the number
of turns decoding on the engine. *Capacity*: full speed while at most `--capacity` turns decode on an engine, each at
capacity / n of it when n do, so an engine's throughput stops growing at its capacity; both pause while the engine
is paused for a weight update. The capacity, 8 concurrent decodes per engine, is the knee of published vLLM serving
measurements of an 8B model on one GPU: Llama-3.1-8B-Instruct on one A100 40 GB, vLLM 0.23, 1,024 in / 128 out
tokens, scales nearly linearly to 8 concurrent requests and per-token latency climbs beyond
(johnmusgrave.com/p/vllm-throughput-latency-sweep-on); on one H100 80 GB, vLLM 0.21, its time per output token is
6.5 ms at 1 and 4 concurrent requests, 10.9 ms at 16 and 46.9 ms at 64, which flat-then-proportional fits with a
capacity of 9-10 (yobitelcomm.github.io/bench/recipes/concurrency-sweep). The model is harsher than a real engine
(whose throughput still grows somewhat past the knee), so it narrows what keeping engines full can gain.

Workloads: turns per trajectory Pareto (scale 2, shape 1) clipped to the recipe's `agent.max_turns` (local_7b_1node:
32; local_7b_long: 128); each turn a real vLLM decode of 8 tokens plus the full-size decode; every turn but the last
a real KB search. Token counts per turn are the CPU harness's (the tiny model's 8,192 positions hold 128 short turns),
the recipes' 1,024-token turns being stood for by `--turn-s` seconds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from asearcher_plugin.agent.prompts import build_prompt  # noqa: E402
from asearcher_plugin.openrlhf.cpu.workload import Workload, plan_turns, scripted_turns  # noqa: E402
from asearcher_plugin.recipe import Recipe  # noqa: E402
from benchmarks import openrlhf_cpu, scheduler_sim  # noqa: E402
from benchmarks.readme_table import publish  # noqa: E402
from benchmarks.run_key import keep_result, kept_result, run_key  # noqa: E402

WORKLOADS = {"32 turns": "local_7b_1node", "128 turns": "local_7b_long"}
CAPACITY = 8  # concurrent full-speed decodes per engine (the module docstring says where it comes from)


def configurations(args) -> dict[str, dict]:
    """Every OpenRLHF configuration swept, and streaming."""
    sizes = sorted({args.batch, 2 * args.batch, (args.eta + 1) * args.batch, args.prompts})
    out = {}
    for queue, size, part in itertools.product((1, 2, 4), sizes, (False, True)):
        name = f"OpenRLHF queue {queue}, generate {size}, partial {'on' if part else 'off'}"
        out[name] = {"queue": queue, "generate": size, "partial": part}
    out["streaming"] = {"streaming": True}
    for eta in args.sim_etas:  # simulated only: what a looser staleness bound buys
        if eta != args.eta:
            out[f"streaming, eta {eta}"] = {"streaming": True, "eta": eta}
    return out


def overrides(config: dict, args) -> list[str]:
    """The run's --set lines for a configuration."""
    if config.get("streaming"):
        eta = config.get("eta", args.eta)
        return [f"scheduler.max_concurrent={(eta + 1) * args.batch}", f"scheduler.max_staleness={eta}"]
    return [
        "scheduler.enable=false",
        f"openrlhf.train.async_queue_size={config['queue']}",
        f"openrlhf.rollout.vllm_generate_batch_size={config['generate']}",
        f"openrlhf.train.partial_rollout_enable={str(config['partial']).lower()}",
    ]


# --- 1. the sweep, simulated ------------------------------------------------------------------------------------


def pareto_workload(args, max_turns: int) -> list:
    """Groups of n trajectories, each a list of (decode tokens, seconds after the decode) per turn: the real chain's
    own episode. Each trajectory's plan is drawn from its question and sample number as the scripted engine draws it
    (`workload.plan_turns` over the prompts `openrlhf_cpu.prompt_rows` writes) and takes the turns the engine takes
    for it in the real chain's prompt (`workload.scripted_turns`)."""
    w = Workload(max_turns=max_turns, turns_scale=args.scale, pareto_alpha=args.alpha, seed=args.seed)
    examples = build_prompt(Recipe.load(openrlhf_cpu.RECIPE).agent.agent_type, "?").count("</search>")
    turn = (args.turn_s / args.sim_tok_s, args.sim_turn_overhead_s)
    return [
        [[turn] * scripted_turns(plan_turns(w, row["question"], k), examples) for k in range(args.n)]
        for row in openrlhf_cpu.prompt_rows(args.prompts)
    ]


def simulate(args, workload: str, capacity: int | None) -> dict[str, dict]:
    """The sweep of one workload (its recipe's turn limit, its simulated training step) under one cost model."""
    max_turns = Recipe.load(WORKLOADS[workload]).agent.max_turns
    train_s = dict(zip(WORKLOADS, args.sim_train_s))[workload]
    data = pareto_workload(args, max_turns)
    sim = SimpleNamespace(
        engines=args.engines,
        slots=capacity,
        tok_s=args.sim_tok_s,
        batch=args.batch,
        n=args.n,
        steps=len(data) // args.batch,
        train_s=train_s,
        sync_s=args.sim_sync_s,
        max_concurrent=None,
    )
    out = {}
    for name, config in configurations(args).items():
        if config.get("streaming"):
            mode = partial(scheduler_sim.mode_streaming, eta=config.get("eta", args.eta), on_stale="keep")
        else:
            mode = partial(
                scheduler_sim.mode_openrlhf,
                generate_batch=config["generate"],
                queue_size=config["queue"],
                partial=config["partial"],
            )
        r = scheduler_sim.run_mode(mode, data, sim)
        out[name] = {k: r[k] for k in ("seconds", "traj_per_s", "engine_idle", "staleness_max", "staleness_mean")}
    for name, seconds in bounds(args, data, capacity, train_s).items():
        out[name] = {"seconds": seconds, "traj_per_s": len(data) * args.n / seconds}
    out["settings"] = {  # what this simulation used, as the JSON's record
        "max_turns": max_turns,
        "train_s": train_s,
        "sync_s": args.sim_sync_s,
        "turn_s": args.turn_s,
        "turn_overhead_s": args.sim_turn_overhead_s,
        "tok_s": args.sim_tok_s,
        "capacity": capacity,
        "prompts": len(data),
        "turns": sum(len(t) for g in data for t in g),
        "longest": max(len(t) for g in data for t in g),
    }
    return out


def bounds(args, data: list, capacity: int | None, train_s: float) -> dict[str, float]:
    """The two bound rows: no scheduler finishes sooner than the first; none admitting in order under the staleness
    rule sooner than the second, which is therefore never below the first (the plain bound holds under it too)."""
    plain = lower_bound(args, data, capacity, train_s)
    return {"lower bound": plain, "lower bound at eta": max(plain, staleness_bound(args, data, train_s))}


def lower_bound(args, data: list, capacity: int | None, train_s: float) -> float:
    """Seconds no scheduler can beat on the simulated fleet with workload `data`: the engines' full-size decode
    work at full capacity followed by the update that trains the last of it, the longest trajectory run alone at
    full speed and then trained, or the training steps back to back, whichever is longest."""
    turns = [len(t) for g in data for t in g]
    engine_work = sum(turns) * args.turn_s / (args.engines * capacity) + train_s if capacity else 0.0
    critical = max(turns) * (args.turn_s + args.sim_turn_overhead_s) + train_s
    return max(engine_work, critical, len(data) // args.batch * train_s)


def staleness_bound(args, data: list, train_s: float) -> float:
    """Seconds no scheduler finishes sooner if it admits the prompts in order under AReaL's staleness rule (at
    most (eta + v + 1) x B groups admitted while the policy is at version v), as the streaming scheduler does:
    group g waits for version g // B - eta, each version takes at least a training step and a weight broadcast,
    then its longest trajectory runs alone at full speed and its batch is trained."""
    per_version = train_s + args.sim_sync_s
    per_turn = args.turn_s + args.sim_turn_overhead_s
    return train_s + max(
        max(0, g // args.batch - args.eta) * per_version + max(len(t) for t in group) * per_turn
        for g, group in enumerate(data)
    )


def best_openrlhf(sim: dict[str, dict], stalest: float | None = None) -> str:
    """The OpenRLHF configuration of the highest simulated throughput, of those whose mean staleness is at most
    `stalest` if given."""
    names = [n for n in sim if n.startswith("OpenRLHF") and (stalest is None or sim[n]["staleness_mean"] <= stalest)]
    return max(names, key=lambda n: sim[n]["traj_per_s"])


def run_length(args, sims: dict) -> tuple[list[str], list[list], dict]:
    """Simulated only, capacity model: the same comparison over runs of `args.prompts` and each of
    `args.sim_prompts` prompts (one pass over them), the swept generate batch reaching all of them. The one-episode
    run is what the real chain affords; a training run is longer, and what changes with its length is what an
    end-of-run drain costs and how stale a generate call of all the prompts is. The sweeps of `args.prompts` are
    those of `sims` where the capacity model ran."""
    header = [
        "workload",
        "prompts (updates)",
        "streaming span s",
        "streaming max / mean staleness",
        "best OpenRLHF: configuration, span s, max / mean staleness",
        "streaming vs best",
        "best OpenRLHF as fresh as streaming: configuration, span s",
        "streaming vs it",
        "lower bound vs best",
        "lower bound at eta vs best",
    ]
    out, payload = [], {}
    for workload, prompts in itertools.product(args.workloads, [args.prompts, *args.sim_prompts]):
        sim = sims.get((workload, "capacity")) if prompts == args.prompts else None
        if sim is None:
            sim = simulate(argparse.Namespace(**{**vars(args), "prompts": prompts}), workload, CAPACITY)
        payload[f"{workload} / {prompts}"] = sim
        s = sim["streaming"]
        best = best_openrlhf(sim)
        fresh = best_openrlhf(sim, stalest=s["staleness_mean"])
        b, f = sim[best], sim[fresh]
        out.append(
            [
                workload,
                f"{prompts} ({prompts // args.batch})",
                f"{s['seconds']:.0f}",
                f"{s['staleness_max']} / {s['staleness_mean']:.2f}",
                f"{best.removeprefix('OpenRLHF ')}, {b['seconds']:.0f}, "
                f"{b['staleness_max']} / {b['staleness_mean']:.2f}",
                f"{b['seconds'] / s['seconds']:.2f}x",
                f"{fresh.removeprefix('OpenRLHF ')}, {f['seconds']:.0f}",
                f"{f['seconds'] / s['seconds']:.2f}x",
                f"{b['seconds'] / sim['lower bound']['seconds']:.2f}x",
                f"{b['seconds'] / sim['lower bound at eta']['seconds']:.2f}x",
            ]
        )
    return header, out, payload


def run_length_note(args) -> str:
    return (
        f"simulated, capacity model ({CAPACITY} full-speed decodes per engine), the workloads and timings of the "
        f"table above, B={args.batch} x n={args.n}, eta={args.eta}; one pass over the prompts, OpenRLHF's "
        "generate batch swept over B, 2B, (eta + 1) x B and all the prompts. Lower bound vs best: how much faster "
        "than the best OpenRLHF configuration any scheduler could be on the simulated fleet; at eta: any scheduler "
        "that admits the prompts in order under the staleness rule"
    )


# --- 2. the real chain, repeated ----------------------------------------------------------------------------------


def real_runs(args, workload: str, cost: str, names: list[str], configs: dict, server_url: str, model, prompts):
    """`args.repeats` runs of each configuration, alternating, each kept in work/<workload>/<cost>/<config>/<i>."""
    recipe = Recipe.load(WORKLOADS[workload])
    run_args = SimpleNamespace(
        max_turns=recipe.agent.max_turns,
        max_len=openrlhf_cpu.TINY_POSITIONS,
        scale=args.scale,
        alpha=args.alpha,
        tokens_per_turn=args.tokens_per_turn,
        turn_s=args.turn_s,
        capacity=CAPACITY if cost == "capacity" else None,
        seed=args.seed,
        prefix_caching=args.prefix_caching,
        batch=args.batch,
        n=args.n,
        engines=args.engines,
        queue=1,
        eta=args.eta,
        fit_s=0.0,
    )
    key = run_key(vars(run_args))
    results: dict[str, list[dict]] = {name: [] for name in names}
    for i in range(args.repeats):
        for name in names:
            work = Path(args.work).resolve() / openrlhf_cpu.slug(workload) / cost / str(i)
            done = work / openrlhf_cpu.slug(name) / "result.json"
            kept = kept_result(done, key)
            if kept is not None:
                results[name].append(kept)
                print(f"== {workload}, {cost}, {name}, run {i + 1}: kept from {done}", flush=True)
                continue
            print(f"== {workload}, {cost}, {name}, run {i + 1} of {args.repeats}", flush=True)
            work.mkdir(parents=True, exist_ok=True)
            result = {"commit": key["commit"]} | openrlhf_cpu.run_mode(
                name, overrides(configs[name], args), run_args, work, model, prompts, server_url
            )
            keep_result(done, key, result)
            print(json.dumps(result), flush=True)
            results[name].append(result)
    return results


# --- the table ----------------------------------------------------------------------------------------------------

HEADER = [
    "workload",
    "cost model",
    "configuration",
    "simulated span s",
    "sim vs best OpenRLHF",
    "sim vs best OpenRLHF as fresh as streaming",
    "sim max / mean staleness",
    "real span s: median (range)",
    "real vs best OpenRLHF",
    "real engine idle",
    "real max / mean staleness",
]


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def rows(sims: dict, reals: dict, args) -> list[list]:
    out = []
    for (workload, cost), sim in sims.items():
        best = best_openrlhf(sim)
        fresh = best_openrlhf(sim, stalest=sim["streaming"]["staleness_mean"])
        marks = {
            "lower bound": ": no scheduler finishes sooner",
            "lower bound at eta": f" {args.eta}: no scheduler admitting in order under the staleness rule "
            "finishes sooner",
            fresh: " (best OpenRLHF as fresh as streaming)",
            best: " (best OpenRLHF, as fresh as streaming)" if best == fresh else " (best OpenRLHF)",
        }
        real = reals.get((workload, cost), {})
        best_real = statistics.median(r["span_s"] for r in real[best]) if real.get(best) else None
        order = sorted(
            (n for n in sim if n != "settings"),
            key=lambda n: (
                n != "lower bound",
                n != "lower bound at eta",
                n != "streaming",
                n != best,
                n != fresh,
                -sim[n]["traj_per_s"],
            ),
        )
        for name in order:
            s, runs = sim[name], real.get(name, [])
            spans = [r["span_s"] for r in runs]
            median = statistics.median(spans) if spans else None
            stale = [r for r in runs if r.get("staleness_max") is not None]
            out.append(
                [
                    workload,
                    cost,
                    name + marks.get(name, ""),
                    f"{s['seconds']:.0f}",
                    f"{s['traj_per_s'] / sim[best]['traj_per_s']:.2f}x",
                    f"{s['traj_per_s'] / sim[fresh]['traj_per_s']:.2f}x",
                    f"{s['staleness_max']} / {s['staleness_mean']:.2f}" if "staleness_max" in s else "–",
                    f"{median:.0f} ({min(spans):.0f}-{max(spans):.0f}), {_runs(len(spans))}" if spans else "–",
                    f"{best_real / median:.2f}x" if spans and best_real else "–",
                    f"{statistics.median(r['engine_idle'] for r in runs):.0%}" if runs else "–",
                    (
                        f"{max(r['staleness_max'] for r in stale)} / "
                        f"{statistics.mean(r['staleness_mean'] for r in stale):.2f}"
                        if stale
                        else "–"
                    ),
                ]
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--cost-models", nargs="+", default=["flat", "capacity"], choices=["flat", "capacity"])
    ap.add_argument("--repeats", type=int, default=3, help="real-chain runs per configuration (0: the sweep only)")
    ap.add_argument(
        "--real-cost-models",
        nargs="+",
        default=["flat", "capacity"],
        choices=["flat", "capacity"],
        help="the cost models whose best configurations also run on the real chain",
    )
    openrlhf_cpu.add_workload_arguments(ap)
    # the simulator's timings, from the real chain's runs (fit log: a training step; trace: a turn's other costs)
    ap.add_argument(
        "--sim-train-s",
        type=float,
        nargs=2,
        default=[6.0, 18.0],
        help="simulated training step at 32 and at 128 turns (the real chain's fit log: 4.6-9.5 s and ~18 s)",
    )
    ap.add_argument(
        "--sim-etas",
        type=int,
        nargs="*",
        default=[8, 11],
        help="staleness bounds of the extra simulated streaming rows (11: the whole episode admitted at once)",
    )
    ap.add_argument(
        "--sim-prompts",
        type=int,
        nargs="*",
        default=[96, 192],
        help="longer runs, simulated under the capacity model for the run-length table",
    )
    ap.add_argument("--sim-sync-s", type=float, default=1.0, help="simulated weight broadcast")
    ap.add_argument("--sim-turn-overhead-s", type=float, default=0.3, help="simulated real decode + KB search a turn")
    ap.add_argument("--sim-tok-s", type=float, default=0.01, help="simulated seconds a token (sets the granularity)")
    ap.add_argument("--work", default="runs/bench-streaming-speedup")
    ap.add_argument(
        "--from-results",
        metavar="JSON",
        help="the real-chain runs of a saved result (benchmarks/results/streaming_speedup.json) instead of new "
        "ones, with its arguments; the sweep runs again",
    )
    args = ap.parse_args()
    saved = json.loads(Path(args.from_results).read_text()) if args.from_results else None
    if saved:
        # the real runs' arguments; the simulator's own settings (sim_*) from this command line
        kept = {k: v for k, v in saved["args"].items() if not k.startswith("sim_")}
        args = argparse.Namespace(**{**vars(args), **kept, "from_results": args.from_results})

    sims = {}
    for workload, cost in itertools.product(args.workloads, args.cost_models):
        sims[(workload, cost)] = simulate(args, workload, CAPACITY if cost == "capacity" else None)
        best = best_openrlhf(sims[(workload, cost)])
        print(f"== sweep, {workload}, {cost}: best OpenRLHF configuration {best}", flush=True)

    if saved:  # the sweep is seconds of virtual time, so it runs again; the real runs are the saved ones
        reals = {tuple(k.split(" / ")): v for k, v in saved["reals"].items()}
    else:
        reals = run_chain(args, sims) if args.repeats else {}
    payload = {
        "args": vars(args),  # the real runs' (saved ones' with --from-results) and the simulator's, as used
        "sims": {" / ".join(k): v for k, v in sims.items()},
        "reals": {" / ".join(k): v for k, v in reals.items()},
    }
    print(publish("streaming_speedup", HEADER, rows(sims, reals, args), note(args, reals), payload))
    header, table, length = run_length(args, sims)
    print(
        publish("streaming_speedup_length", header, table, run_length_note(args), length, script="streaming_speedup")
    )


def run_chain(args, sims: dict) -> dict:
    from local_retriever.server_process import start_server, wait_healthy

    kb, model, prompts = openrlhf_cpu.prepare(Path(args.work).resolve(), args.prompts)
    configs = configurations(args)
    server = start_server(kb, 5124, "bm25")
    reals = {}
    try:
        wait_healthy("http://127.0.0.1:5124", server)
        for (workload, cost), sim in sims.items():
            if cost not in args.real_cost_models:
                continue
            names = ["streaming", best_openrlhf(sim)]
            reals[(workload, cost)] = real_runs(
                args, workload, cost, names, configs, "http://127.0.0.1:5124", model, prompts
            )
    finally:
        server.terminate()
    return reals


def note(args, reals: dict) -> str:
    startup = [r["startup_s"] for runs in reals.values() for rs in runs.values() for r in rs]
    before = f" (start-up before it: {min(startup):.0f}-{max(startup):.0f} s a run)" if startup else ""
    return (
        f"{args.engines} engines, B={args.batch} prompts x n={args.n}, {args.prompts} prompts (one episode, "
        f"{args.prompts * args.n} trajectories), eta={args.eta}; streaming keeps (eta + 1) x B groups in flight. "
        f"Each turn: a real vLLM decode of {args.tokens_per_turn} tokens, a full-size decode of {args.turn_s:g} s "
        f"(flat, or at most {CAPACITY} at full speed per engine), a real KB search. Simulated: virtual time, "
        f"training step {args.sim_train_s[0]:g} s (32 turns) / {args.sim_train_s[1]:g} s (128), "
        f"weight broadcast {args.sim_sync_s:g} s, "
        f"{args.sim_turn_overhead_s:g} s a turn besides the full-size decode. "
        f"Real: vLLM's prefix caching {'on' if args.prefix_caching else 'off'}, span from the "
        f"first request an engine receives to the last trained step{before}, "
        "median and range over fresh runs; ratio = best OpenRLHF configuration's median span / this row's. "
        "Staleness: policy versions between a group's admission (OpenRLHF: its generate call) and the update "
        "that trains it (for OpenRLHF's generator simulated only: these real runs predate the count of the "
        "trained tokens' versions, which the equal-staleness table above uses). Lower bound: "
        "the longest of the engines' full-size decode work at full capacity and the update after it, the longest "
        "trajectory alone at full speed and its update, and the training steps back to back; no scheduler finishes "
        "sooner on the simulated fleet. Lower bound at eta: each group admitted no sooner than the staleness rule "
        "allows (a version costs a training step and a broadcast), then its longest trajectory at full speed and its "
        "update."
    )


if __name__ == "__main__":
    main()
