"""OpenRLHF's async trainer in its three configurations against the streaming scheduler, through the real chain.

One command: `python benchmarks/openrlhf_cpu.py`. Each mode is a full `asearcher train cpu_tiny --cpu` run
(OpenRLHF 0.11.2's `train()`, its async trainer and actors, our agent on the sample KB, real vLLM engines and
OpenRLHF's DeepSpeed policy actor on CPU; see asearcher_plugin/openrlhf/cpu), one pass over the same prompts, so
every mode trains the same trajectories. Modes: OpenRLHF async; + partial rollout; + partial rollout with
`rollout.vllm_generate_batch_size = (eta + 1) x B` (one generate call makes eta + 1 batches, the extras are
buffered: OpenRLHF's own knob for keeping engines fed); the streaming scheduler with (eta + 1) x B groups in flight.

The workload is a scheduling workload (asearcher_plugin/openrlhf/cpu/workload.py): each trajectory's turn count is
drawn from its question and sample number (Pareto, clipped to the `agent.max_turns` of the shipped recipe given by
`--recipe`, by default local_7b_1node's 32, with its `data.max_len` up to the tiny model's 8,192 positions), every
turn but the last is a real KB search, and every turn is a real vLLM decode of `--tokens-per-turn` tokens plus
`--turn-s` seconds standing for a full-size model's decode of hundreds of tokens (the recipes allow up to 1024 a
turn). That time is flat in the number of requests sharing an engine, as a GPU decode is within its batch capacity;
the tiny model's decode on 2 shared CPU cores is not, and every token decoded is also trained on by a CPU update
that is far slower than generation (bf16 emulated on AVX2), which would make every mode trainer-bound. A training
step is OpenRLHF's real update of the tiny model (plus `--fit-s`).

Span: from the first request any engine receives to the last trained step; throughput = trajectories trained /
span; engine idle = share of the span with no request decoding, per engine. Start-up (Ray, engines, DeepSpeed)
lies before the span and is reported apart, as is the ramp (first request to first update). Staleness of the
trained tokens, for every mode alike: the update that trains a token against the weight version its engine held
when the token's call was read (benchmarks/trained_staleness.py); the streaming trace's own, per group: train
version - admission version.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from asearcher_plugin.openrlhf.cpu import scripted  # noqa: E402
from asearcher_plugin.recipe import Recipe  # noqa: E402
from benchmarks.readme_table import publish  # noqa: E402
from benchmarks.run_key import keep_result, kept_result, run_key  # noqa: E402
from benchmarks.trained_staleness import read_calls, trained_staleness  # noqa: E402

TINY_POSITIONS = 8192  # the tiny model's max_position_embeddings


def modes(args) -> dict[str, list[str]]:
    ahead = (args.eta + 1) * args.batch  # groups: what streaming keeps in flight and the big generate call makes
    return {
        "OpenRLHF async": ["openrlhf.train.partial_rollout_enable=false", "scheduler.enable=false"],
        "OpenRLHF async + partial rollout": ["scheduler.enable=false"],
        f"OpenRLHF async + partial, generate batch {ahead}": [
            "scheduler.enable=false",
            f"openrlhf.rollout.vllm_generate_batch_size={ahead}",
        ],
        "streaming scheduler": [f"scheduler.max_concurrent={ahead}"],
        "streaming, on_stale mask": [f"scheduler.max_concurrent={ahead}", "scheduler.on_stale=mask"],
        "streaming, on_stale restart": [f"scheduler.max_concurrent={ahead}", "scheduler.on_stale=restart"],
    }


RECIPE = "cpu_tiny"  # every real-chain run's recipe, with the overrides of run_mode


def slug(name: str) -> str:
    return name.replace(" ", "_").replace("+", "and").replace(",", "")


def run_mode(name: str, overrides: list[str], args, work: Path, model: Path, prompts: Path, kb_url: str) -> dict:
    out = work / slug(name)
    shutil.rmtree(out, ignore_errors=True)
    (out / "engines").mkdir(parents=True)
    workload = {
        "max_turns": args.max_turns,
        "turns_scale": args.scale,
        "pareto_alpha": args.alpha,
        "tokens_per_turn": args.tokens_per_turn,
        "turn_seconds": args.turn_s,
        "capacity": getattr(args, "capacity", None),
        "query_words": 4,
        "seed": args.seed,
    }
    env = os.environ
    sets = [
        f"openrlhf.train.agent_func_path={scripted.__file__}",
        f"openrlhf.actor.model_name_or_path={model}",
        f"openrlhf.data.prompt_dataset={prompts}",
        f"agent.tools.local.urls=[{kb_url}]",
        "agent.tools.topk=1",
        "agent.tools.max_doc_chars=50",  # short tool output: the CPU update's cost grows with sequence length
        f"agent.max_turns={args.max_turns}",
        "agent.max_new_tokens_per_turn=64",
        "agent.reward.format_factor=false",
        f"openrlhf.data.max_len={args.max_len}",
        f"openrlhf.rollout.batch_size={args.batch}",
        f"openrlhf.rollout.n_samples_per_prompt={args.n}",
        f"openrlhf.train.batch_size={args.batch * args.n}",
        "openrlhf.train.micro_batch_size=4",  # few pad tokens: sequences of 1 and 32 turns share no micro-batch
        "openrlhf.rollout.micro_batch_size=4",
        f"openrlhf.vllm.num_engines={args.engines}",
        # off by default, as in every published run: the scripted engine once read corrupt prompt log-probs with it
        # on (what-ran-where.md, item 9); with it off each call prefills its trajectory's whole context
        f"openrlhf.vllm.enable_prefix_caching={str(args.prefix_caching).lower()}",
        f"openrlhf.train.async_queue_size={args.queue}",
        f"scheduler.max_staleness={args.eta}",
        f"openrlhf.ckpt.path={out / 'ckpt'}",
        f"openrlhf.ckpt.output_dir={out / 'final'}",
        f"scheduler.trace={out / 'trace.jsonl'}",
        f"cpu_harness.workload={json.dumps(workload)}",
        f"cpu_harness.engine_stats={out / 'engines'}",
        f"cpu_harness.fit_seconds={args.fit_s}",
        *overrides,
    ]
    cmd = [sys.executable, "-m", "asearcher_plugin.cli", "train", RECIPE, "--cpu"]
    started = time.time()
    proc = subprocess.run(
        [*cmd, *[x for s in sets for x in ("--set", s)]], capture_output=True, text=True, env=env, cwd=out
    )
    (out / "train.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: training failed, see {out / 'train.log'}")
    fits, engines, rows = read_run(out)
    start, end = min(a for ivs in engines.values() for a, _ in ivs), fits[-1]["time"]
    span = end - start
    busy = sum(busy_in(ivs, start, end) for ivs in engines.values())
    trained = sum(exp["samples"] for fit in fits for exp in fit["experiences"])
    staleness = [g["staleness"] for row in rows for g in row["groups"]]
    info = lambda key: sum(v for fit in fits for exp in fit["experiences"] for v in exp["info"].get(key, []))  # noqa: E731
    turns = [t for fit in fits for exp in fit["experiences"] for t in exp["info"].get("turns", [])]
    return {
        "steps": len(fits),
        "trained": trained,
        "span_s": span,
        "traj_per_s": trained / span,
        "startup_s": start - started,
        "ramp_s": fits[0]["time"] - start,
        "engine_idle": 1 - busy / (span * len(engines)),
        "engines": len(engines),
        "staleness_max": max(staleness, default=None),
        "staleness_mean": statistics.mean(staleness) if staleness else None,
        "turns_mean": statistics.mean(turns) if turns else None,
        "turns_max": max(turns, default=None),
        "generated_tokens": info("generated_tokens"),
        "stale_tokens": info("stale_tokens") if rows else None,  # more than eta versions behind their update
        "stale_tokens_masked": info("stale_tokens_masked") if rows else None,
        "restarted": rows[-1]["stats"]["stale_restarted"] if rows else None,
        "dropped": rows[-1]["stats"]["stale_dropped"] if rows else None,
        "fit_s_mean": statistics.mean(f["time"] - f.get("started", f["time"]) for f in fits),
        # every token in the loss, whichever generator made it: the engine's weight version at its call against the
        # update that trains it (trained_staleness.py); "staleness_*" above are the streaming trace's, per group
        "trained_staleness": trained_staleness(fits, read_calls(out / "engines")),
        "wall_s": time.time() - started,
    }


def _jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_run(out: Path) -> tuple[list[dict], dict[str, list[tuple[float, float]]], list[dict]]:
    """What a finished run left in its folder: the policy actor's fit log, each engine's busy intervals (engines
    that recorded any), and the scheduler's trace (none for OpenRLHF's own generator)."""
    fits = _jsonl(out / "ckpt" / "cpu_harness_fits.jsonl")
    engines = {
        path.name: [tuple(iv) for iv in _jsonl(path)] for path in sorted((out / "engines").glob("engine-*.jsonl"))
    }
    trace = out / "trace.jsonl"
    return fits, {name: ivs for name, ivs in engines.items() if ivs}, _jsonl(trace) if trace.exists() else []


def busy_in(intervals: list[tuple[float, float]], a: float, b: float) -> float:
    """Seconds of [a, b] inside the intervals."""
    return sum(max(0.0, min(y, b) - max(x, a)) for x, y in intervals)


def add_workload_arguments(ap: argparse.ArgumentParser) -> None:
    """The episode, fleet and scripted workload of a real-chain scheduling run."""
    ap.add_argument("--prompts", type=int, default=48, help="questions; one pass over them (one episode)")
    ap.add_argument("--batch", type=int, default=4, help="rollout.batch_size (groups per step)")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--eta", type=int, default=4, help="scheduler.max_staleness")
    ap.add_argument("--scale", type=float, default=2.0, help="Pareto scale of the turn count")
    ap.add_argument("--alpha", type=float, default=1.0, help="Pareto shape of the turn count")
    ap.add_argument("--tokens-per-turn", type=int, default=8, help="real vLLM decode per turn")
    ap.add_argument(
        "--turn-s",
        type=float,
        default=1.5,
        help="a full-size model's decode time each turn stands for, at full speed (see workload.FullSizeDecode)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--prefix-caching",
        action="store_true",
        help="vLLM's prefix caching on, as in the recipes (off by default, as in the published runs)",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_arguments(ap)
    ap.add_argument("--queue", type=int, default=1, help="train.async_queue_size")
    ap.add_argument(
        "--fit-s",
        type=float,
        default=0.0,
        help="seconds added to each training step (the CPU update itself takes ~3 s)",
    )
    ap.add_argument("--recipe", default="local_7b_1node", help="the shipped recipe whose turn and length limits apply")
    ap.add_argument("--work", default="runs/bench-openrlhf-cpu")
    ap.add_argument("--fresh", action="store_true", help="run every mode again (default: keep finished modes)")
    args = ap.parse_args()
    recipe = Recipe.load(args.recipe)
    if recipe.agent.training_sequences != "trajectory":
        # OpenRLHF's own generator (the baselines) trains one sequence per trajectory only
        raise SystemExit(f"--recipe {args.recipe}: trains per-call sequences, which OpenRLHF's generator cannot")
    args.max_turns = recipe.agent.max_turns
    args.max_len = min(int(recipe.openrlhf.get("data.max_len", TINY_POSITIONS)), TINY_POSITIONS)

    from local_retriever.server_process import start_server, wait_healthy

    work = Path(args.work).resolve()
    kb, model, prompts = prepare(work, args.prompts)
    server = start_server(kb, 5123, "bm25")
    try:
        wait_healthy("http://127.0.0.1:5123", server)
        results, key = {}, run_key(_measured(vars(args)))
        for name, overrides in modes(args).items():
            done = work / slug(name) / "result.json"
            kept = None if args.fresh else kept_result(done, key)
            if kept is not None:
                results[name] = kept
                print(f"== {name}: kept from {done}", flush=True)
                continue
            print(f"== {name}", flush=True)
            results[name] = run_mode(name, overrides, args, work, model, prompts, "http://127.0.0.1:5123")
            keep_result(done, key, results[name], args=vars(args))
            print(json.dumps(results[name]), flush=True)
    finally:
        server.terminate()
    print(
        publish("openrlhf_cpu", HEADER, table(results), note(args, results), {"args": vars(args), "results": results})
    )


def prompt_rows(count: int) -> list[dict]:
    """`count` prompts: the sample questions in order, numbered so none repeats (the scripted workload draws each
    trajectory's turns from its question, so the numbers also make the workload of a longer run)."""
    from local_retriever.sample import load_sample_questions

    questions = load_sample_questions()
    rows = [questions[i % len(questions)] for i in range(count)]
    return [{"question": q["question"] + f" ({i})", "golden_answers": q["golden_answers"]} for i, q in enumerate(rows)]


def prepare(work: Path, count: int) -> tuple[Path, Path, Path]:
    """The sample KB, the tiny model and `count` prompts (`prompt_rows`) in work/prompts.jsonl."""
    from asearcher_plugin.engines.tiny_model import ensure_tiny_model
    from local_retriever.build import ensure_sample_kb

    work.mkdir(parents=True, exist_ok=True)
    kb, model = ensure_sample_kb(Path("runs/sample-kb")), Path(ensure_tiny_model("runs/tiny-model")).resolve()
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(row) + "\n" for row in prompt_rows(count)))
    return kb, model, prompts


def _measured(args: dict) -> dict:
    """The arguments that shape a run (not --fresh, which only says whether to keep finished ones)."""
    return {k: v for k, v in args.items() if k != "fresh"}


HEADER = [
    "mode",
    "span s",
    "trajectories/s",
    "vs OpenRLHF async",
    "vs best OpenRLHF",
    "engine idle",
    "ramp s",
    "max / mean staleness",
    "tokens > eta behind: trained / masked",
    "groups restarted / dropped",
    "trained",
]


def table(results: dict) -> list[list]:
    base = results["OpenRLHF async"]["traj_per_s"]
    best = max(r["traj_per_s"] for name, r in results.items() if name.startswith("OpenRLHF"))
    stale = lambda r: "–" if r["staleness_max"] is None else f"{r['staleness_max']} / {r['staleness_mean']:.2f}"  # noqa: E731

    def tokens(r):
        if r.get("stale_tokens") is None:
            return "–"
        kept, masked = r["stale_tokens"] - r["stale_tokens_masked"], r["stale_tokens_masked"]
        return f"{kept:,.0f} / {masked:,.0f} of {r['generated_tokens']:,.0f}"

    return [
        [
            name,
            f"{r['span_s']:.0f}",
            f"{r['traj_per_s']:.2f}",
            f"{r['traj_per_s'] / base:.2f}x",
            f"{r['traj_per_s'] / best:.2f}x",
            f"{r['engine_idle']:.0%}",
            f"{r['ramp_s']:.0f}",
            stale(r),
            tokens(r),
            "–" if r.get("restarted") is None else f"{r['restarted']} / {r['dropped']}",
            f"{r['trained']} in {r['steps']} steps",
        ]
        for name, r in results.items()
    ]


def note(args, results: dict) -> str:
    runs = list(results.values())
    startup = [r["startup_s"] for r in runs]
    share = max(r["ramp_s"] / r["span_s"] for r in runs)
    fewer = [f"{name} trains {r['trained']}" for name, r in results.items() if r["trained"] != runs[0]["trained"]]
    return (
        f"OpenRLHF 0.11.2's own `train()` on CPU (`asearcher train --cpu`), {args.engines} vLLM engines, "
        f"B={args.batch} prompts x n={args.n}, {args.prompts} prompts (one episode: {runs[0]['trained']} "
        f"trajectories trained{' (' + '; '.join(fewer) + ': the groups it dropped)' if fewer else ' in every mode'}), "
        f"async_queue_size={args.queue}, eta={args.eta}. Workload: 1-"
        f"{args.max_turns} turns per trajectory ({args.recipe}'s max_turns; Pareto scale {args.scale}, alpha "
        f"{args.alpha}: mean {statistics.mean(r['turns_mean'] for r in runs):.1f} turns), every turn a real vLLM "
        f"decode of {args.tokens_per_turn} tokens plus {args.turn_s:g} s standing for a full-size model's decode "
        "(flat in concurrency, as on a GPU within its batch capacity), all but the last a real KB search with 4 "
        "words of the question; a training step is "
        f"OpenRLHF's real update of the tiny model{f' + {args.fit_s:.0f} s' if args.fit_s else ''}. Span: first "
        "request to an engine -> last trained step (the same work in every mode); throughput = trajectories / span; "
        f"idle over the span. Start-up before the span: {min(startup):.0f}-{max(startup):.0f} s per run; the ramp "
        f"(first request -> first update) is at most {share:.0%} of a span. Tokens > eta behind: generated by a "
        "model call that began more than eta versions before the update that trains it (on_stale keep trains them, "
        "mask takes them out of the loss, restart stops such groups and starts them afresh once, then drops them)"
    )


if __name__ == "__main__":
    main()
