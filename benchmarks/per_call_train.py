"""Per-call training at length through the real chain: `asearcher train cpu_tiny --cpu`, two policy actors.

One command: `python benchmarks/per_call_train.py`. For each trajectory length (default 1 / 8 / 32 / 48 turns) one
full training run: OpenRLHF 0.11.2's `train()` with the streaming scheduler, a real vLLM engine, two DeepSpeed policy
actors (ZeRO-2 on gloo) and a reference actor, `agent.training_sequences: per_call` with the reasoning agent (its
prompt is rebuilt every call, so a trajectory is one sequence per call), on the scripted workload of the CPU harness
(`openrlhf/cpu/workload.py`: every trajectory exactly N turns, each a real search of the sample KB, BM25, and 4
decoded tokens) and the tiny model. Two updates of 2 prompts x 2 samples. Read from what the policy actors logged
(`cpu_harness_fits.jsonl`): sequences per trajectory, the peak tokens of a micro-batch (as the forward pads them)
against the budget `--train.max_tokens_per_gpu`, micro-batches and optimizer steps per update and rank, and each
policy actor's peak RSS. Bytes through Ray per trajectory are the offline measurement of `per_call_scale.py`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402
from benchmarks.train_outage import _jsonl, _port, command  # noqa: E402

# tokens per micro-batch: at least data.max_len (the tiny model's positions); a rank's update at 32 turns
# and more needs several
BUDGET = 8192


def run(turns: int, kb_url: str, model: Path, work: Path, prompts: Path) -> dict:
    workload = {"max_turns": turns, "turns_scale": float(turns), "pareto_alpha": 1.0, "tokens_per_turn": 4}
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    cmd = command(
        work,
        model,
        prompts,
        kb_url,
        "agent.agent_type=asearcher-reasoning",
        "agent.training_sequences=per_call",
        f"agent.max_turns={turns + 4}",
        "agent.reward.function=asearcher_plugin.openrlhf.cpu.learnable:brevity",
        f"openrlhf.data.max_len={BUDGET}",
        "openrlhf.actor.num_gpus_per_node=2",
        "openrlhf.train.batch_size=2",
        "openrlhf.train.micro_batch_size=1",
        "openrlhf.rollout.micro_batch_size=2",
        f"openrlhf.train.max_tokens_per_gpu={BUDGET}",
        # off, as in its published runs: with it on, the scripted tokens of a turn the cache had served once came back
        # with unset prompt log-probs (docs/what-ran-where.md, item 9), which the scripted engine now reads again
        "openrlhf.vllm.enable_prefix_caching=false",
        f"cpu_harness.workload={json.dumps(workload)}",
    )
    start = time.monotonic()
    with open(work / "train.log", "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work).returncode
    if code != 0:
        raise SystemExit(f"{turns} turns: training failed (exit {code}), see {work / 'train.log'}")
    fits = _jsonl(work / "ckpt" / "cpu_harness_fits.jsonl")
    # every sequence logs how many its trajectory has
    per_trajectory = [v for f in fits for e in f["experiences"] for v in e["info"]["sequences_per_trajectory"]]
    micro = [m for f in fits for m in f["micro_batches"]]
    return {
        "turns": turns,
        "updates": len({f["fit"] for f in fits}),
        "ranks": len({f["rank"] for f in fits}),
        "sequences": len(per_trajectory),
        "sequences_per_trajectory": [int(min(per_trajectory)), int(max(per_trajectory))],
        "peak_tokens": max(m["tokens"] for m in micro),
        "update_tokens_per_rank": max(sum(m["tokens"] for m in f["micro_batches"]) for f in fits),
        "micro_batches_per_update_rank": max(len(f["micro_batches"]) for f in fits),
        "optimizer_steps_per_update": max(len({m["step"] for m in f["micro_batches"]}) for f in fits),
        "peak_rss_mb": [round(max(f["peak_rss_mb"] for f in fits if f["rank"] == r)) for r in (0, 1)],
        "wall_s": round(time.monotonic() - start, 1),
    }


def offline_bytes() -> dict[int, int]:
    """Bytes per trajectory through Ray for the reasoning agent, from per_call_scale.py's last results."""
    path = ROOT / "benchmarks" / "results" / "per_call_scale.json"
    if not path.exists():
        return {}
    rows = json.loads(path.read_text())["results"]
    return {r["turns"]: r["bytes_after"] for r in rows if r["recipe"] == "web_qwq32b"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, nargs="+", default=[1, 8, 32, 48])
    ap.add_argument("--work", type=Path, default=Path("runs/bench-per-call-train"))
    args = ap.parse_args()

    from asearcher_plugin.engines.tiny_model import ensure_tiny_model
    from local_retriever.build import MANIFEST_FILE, BuildOptions, build_kb
    from local_retriever.sample import load_sample_questions, sample_dump_path
    from local_retriever.server_process import start_server, wait_healthy

    model = Path(ensure_tiny_model("runs/tiny-model")).resolve()
    kb = Path("runs/sample-kb-bm25")
    if not (kb / MANIFEST_FILE).is_file():
        build_kb(sample_dump_path(), kb, opts=BuildOptions(dense=False))
    args.work.mkdir(parents=True, exist_ok=True)
    prompts = (args.work / "prompts.jsonl").resolve()
    questions = load_sample_questions()[:4]  # two updates of two prompts
    rows = [json.dumps({k: q[k] for k in ("question", "golden_answers")}) for q in questions]
    prompts.write_text("".join(row + "\n" for row in rows))
    port = _port()
    server = start_server(kb, port, "bm25")
    results = []
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server)
        for turns in args.turns:
            results.append(run(turns, f"http://127.0.0.1:{port}", model, (args.work / f"t{turns}").resolve(), prompts))
            print(results[-1], flush=True)
    finally:
        server.terminate()
    ray_bytes = offline_bytes()
    header = [
        "turns / trajectory",
        "sequences / trajectory",
        "tokens / update / rank",
        "peak tokens / micro-batch (budget 8,192)",
        "micro-batches / update / rank",
        "optimizer steps / update",
        "policy actor peak RSS, rank 0 / 1 (MB)",
        "bytes / trajectory through Ray",
        "run wall time (s)",
    ]
    rows = [
        [
            r["turns"],
            "{} - {}".format(*r["sequences_per_trajectory"]),
            f"{r['update_tokens_per_rank']:,}",
            f"{r['peak_tokens']:,}",
            r["micro_batches_per_update_rank"],
            r["optimizer_steps_per_update"],
            " / ".join(f"{m:,}" for m in r["peak_rss_mb"]),
            f"{ray_bytes[r['turns']]:,}" if r["turns"] in ray_bytes else "-",
            r["wall_s"],
        ]
        for r in results
    ]
    note = (
        "`asearcher train cpu_tiny --cpu` per row (start-up included in the wall time): the reasoning agent with "
        "`training_sequences: per_call`, the scripted workload (every trajectory exactly N turns, a real BM25 "
        "search of the sample KB per turn, 4 decoded tokens), the tiny model, 2 updates of 2 prompts x 2 samples, "
        "two policy actors (DeepSpeed ZeRO-2 on gloo), 2 optimizer steps per update, "
        f"`--train.max_tokens_per_gpu {BUDGET}`, vLLM prefix caching off (what-ran-where.md, item 9); "
        "bytes through Ray: `per_call_scale.py` (offline, the same agent)"
    )
    print(publish("per_call_train", header, rows, note, {"args": {"turns": args.turns}, "results": results}))


if __name__ == "__main__":
    main()
