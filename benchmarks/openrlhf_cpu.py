"""OpenRLHF's stock async trainer vs async + partial rollout vs the streaming scheduler, through the real chain.

One command: `python benchmarks/openrlhf_cpu.py`. Each mode is a full `asearcher train
cpu_tiny --cpu` run (OpenRLHF 0.11.2's `train()`, its async trainer and actors, our
agent on the sample KB, real vLLM engines and OpenRLHF's DeepSpeed policy actor on CPU; see
asearcher_plugin/openrlhf_cpu). The workload is a scheduling workload: the agent's turns are scripted, 1 to 64
per trajectory from a Pareto distribution, each but the last a real KB search, and each turn is a real vLLM
decode of `--tokens-per-turn` tokens (asearcher_plugin/openrlhf_cpu/scripted.py); a training step is OpenRLHF's
real update of the tiny model (plus `--fit-s` seconds if given).

Throughput: trajectories trained between the first and last update / that time. Engine idle:
share of the same window with no request decoding. Staleness (ours only; the stock generator
records no versions): train version - admission version.
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

from asearcher_plugin.openrlhf_cpu import scripted  # noqa: E402
from benchmarks.readme_table import publish  # noqa: E402

MODES = {
    "OpenRLHF async": ["openrlhf.train.partial_rollout_enable=false", "scheduler.enable=false"],
    "OpenRLHF async + partial rollout": ["scheduler.enable=false"],
    "streaming scheduler": [],
}


def run_mode(name: str, overrides: list[str], args, work: Path, model: Path, prompts: Path, kb_url: str) -> dict:
    out = work / name.replace(" ", "_").replace("+", "and")
    shutil.rmtree(out, ignore_errors=True)
    (out / "engines").mkdir(parents=True)
    workload = {
        "max_turns": args.max_turns,
        "turns_scale": args.scale,
        "pareto_alpha": args.alpha,
        "tokens_per_turn": args.tokens_per_turn,
        "seed": args.seed,
    }
    env = {
        **os.environ,
        "ASEARCHER_CPU_WORKLOAD": json.dumps(workload),
        "ASEARCHER_CPU_ENGINE_STATS": str(out / "engines"),
        "ASEARCHER_CPU_FIT_SECONDS": str(args.fit_s),
    }
    sets = [
        f"openrlhf.train.agent_func_path={scripted.__file__}",
        f"openrlhf.actor.model_name_or_path={model}",
        f"openrlhf.data.prompt_dataset={prompts}",
        f"agent.tools.local.urls=[{kb_url}]",
        "agent.tools.topk=1",
        "agent.tools.max_doc_chars=100",
        f"agent.max_turns={args.max_turns}",
        "agent.max_new_tokens_per_turn=64",
        "agent.reward.format_factor=false",
        f"openrlhf.data.max_len={args.max_len}",
        f"openrlhf.rollout.batch_size={args.batch}",
        f"openrlhf.rollout.n_samples_per_prompt={args.n}",
        f"openrlhf.train.batch_size={args.batch * args.n}",
        f"openrlhf.vllm.num_engines={args.engines}",
        f"openrlhf.train.async_queue_size={args.queue}",
        f"scheduler.max_staleness={args.eta}",
        f"openrlhf.ckpt.path={out / 'ckpt'}",
        f"openrlhf.ckpt.output_dir={out / 'final'}",
        f"scheduler.trace={out / 'trace.jsonl'}",
        *overrides,
    ]
    cmd = [sys.executable, "-m", "asearcher_plugin.cli", "train", "cpu_tiny", "--cpu"]
    started = time.time()
    proc = subprocess.run(
        [*cmd, *[x for s in sets for x in ("--set", s)]], capture_output=True, text=True, env=env, cwd=out
    )
    (out / "train.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: training failed, see {out / 'train.log'}")
    fits = [json.loads(line) for line in (out / "ckpt" / "cpu_harness_fits.jsonl").read_text().splitlines()]
    start, end = fits[0]["time"], fits[-1]["time"]
    window = end - start
    trained = sum(exp["samples"] for fit in fits[1:] for exp in fit["experiences"])
    engines = list((out / "engines").glob("engine-*.jsonl"))
    busy = sum(
        max(0.0, min(b, end) - max(a, start))
        for path in engines
        for a, b in (json.loads(line) for line in path.read_text().splitlines())
    )
    staleness = (
        [
            g["staleness"]
            for line in (out / "trace.jsonl").read_text().splitlines()
            if (out / "trace.jsonl").exists()
            for g in json.loads(line)["groups"]
        ]
        if (out / "trace.jsonl").exists()
        else []
    )
    turns = [t for fit in fits for exp in fit["experiences"] for t in exp["info"].get("turns", [])]
    return {
        "steps": len(fits),
        "trained": trained,
        "window_s": window,
        "traj_per_s": trained / window,
        "engine_idle": 1 - busy / (window * len(engines)) if engines and window else None,
        "staleness_max": max(staleness, default=None),
        "staleness_mean": statistics.mean(staleness) if staleness else None,
        "turns_mean": statistics.mean(turns) if turns else None,
        "turns_max": max(turns, default=None),
        "wall_s": time.time() - started,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=48, help="questions; one pass over them (one episode)")
    ap.add_argument("--batch", type=int, default=4, help="rollout.batch_size (groups per step)")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--queue", type=int, default=1, help="train.async_queue_size")
    ap.add_argument("--eta", type=int, default=4, help="scheduler.max_staleness")
    ap.add_argument(
        "--fit-s",
        type=float,
        default=0.0,
        help="seconds added to each training step (the CPU update itself takes ~3 s)",
    )
    ap.add_argument("--max-turns", type=int, default=64)
    ap.add_argument("--scale", type=float, default=2.0, help="Pareto scale of the turn count")
    ap.add_argument("--alpha", type=float, default=1.0, help="Pareto shape of the turn count")
    ap.add_argument("--tokens-per-turn", type=int, default=24)
    ap.add_argument("--max-len", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="runs/bench-openrlhf-cpu")
    args = ap.parse_args()

    from asearcher_plugin.engines.tiny_model import ensure_tiny_model
    from local_retriever.build import ensure_sample_kb
    from local_retriever.sample import load_sample_questions
    from local_retriever.server_process import start_server, wait_healthy

    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    kb, model = ensure_sample_kb(Path("runs/sample-kb")), Path(ensure_tiny_model("runs/tiny-model")).resolve()
    questions = load_sample_questions()
    prompts = work / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps(
                {
                    "question": questions[i % len(questions)]["question"] + f" ({i})",
                    "golden_answers": questions[i % len(questions)]["golden_answers"],
                }
            )
            + "\n"
            for i in range(args.prompts)
        )
    )
    server = start_server(kb, 5123, "bm25")
    try:
        wait_healthy("http://127.0.0.1:5123", server)
        results = {}
        for name, overrides in MODES.items():
            print(f"== {name}", flush=True)
            results[name] = run_mode(name, overrides, args, work, model, prompts, "http://127.0.0.1:5123")
            print(json.dumps(results[name]), flush=True)
    finally:
        server.terminate()
    base = results["OpenRLHF async"]["traj_per_s"]
    fmt = lambda v, f: "–" if v is None else format(v, f)  # noqa: E731
    rows = [
        [
            name,
            f"{r['traj_per_s']:.2f}",
            f"{r['traj_per_s'] / base:.2f}x",
            fmt(r["engine_idle"], ".0%"),
            fmt(r["staleness_max"], "d"),
            fmt(r["staleness_mean"], ".2f"),
            r["steps"],
            f"{r['wall_s']:.0f}",
        ]
        for name, r in results.items()
    ]
    note = (
        f"OpenRLHF 0.11.2's own `train()` on CPU (`asearcher train --cpu`), {args.engines} engines, B={args.batch} "
        f"prompts x n={args.n}, {args.prompts} prompts (one episode), async_queue_size={args.queue}, eta={args.eta}; "
        f"scripted scheduling workload: 1-{args.max_turns} turns per trajectory (Pareto scale {args.scale}, alpha "
        f"{args.alpha}), real KB searches, a real vLLM decode of {args.tokens_per_turn} tokens per turn; "
        "a training step is OpenRLHF's real update of the tiny "
        f"model{f' + {args.fit_s:.0f} s' if args.fit_s else ''}. Throughput and "
        "idle are measured between the first and last update"
    )
    print(
        publish(
            "openrlhf_cpu",
            [
                "mode",
                "trajectories/s",
                "vs OpenRLHF async",
                "engine idle",
                "max staleness",
                "mean staleness",
                "steps",
                "wall s",
            ],
            rows,
            note,
            {"args": vars(args), "results": results},
        )
    )


if __name__ == "__main__":
    main()
