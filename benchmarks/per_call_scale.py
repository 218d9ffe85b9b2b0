"""What per-call training puts through Ray and into each micro-batch as the calls per trajectory grow.

One command: `python benchmarks/per_call_scale.py`. The agents of the two long-horizon recipes, `web_qwq32b`'s
reasoning agent (one sequence per call: its prompt is rebuilt) and `local_7b_long`'s `asearcher` agent (calls merged
until a page chunk is replaced by its stub), run scripted trajectories of 1 / 8 / 32 / 128 turns on the sample KB
(BM25) with the tiny model's tokenizer (the offline path of `benchmarks/sequences.py`). For each:

- bytes per trajectory through Ray: the response dict as Ray's own serialiser encodes it, as `to_openrlhf` builds it
  now (sequences only) and with the whole trajectory's tokens, spans, log-probs, text and times beside them, as it
  did before;
- the recipe's update on one policy rank (its share of `rollout.batch_size x n` trajectories over
  `actor.num_nodes x num_gpus_per_node` ranks, every trajectory shaped like the measured one): the peak tokens of a
  micro-batch (padded, as the forward runs without packing) and the micro-batches, optimizer steps per update, for
  the fixed count of micro-batches used before (steps x gradient accumulation, balanced by tokens) and for the
  token budget (`--train.max_tokens_per_gpu`, `micro_batches.plan_steps`).

The policy actor's peak RSS comes from real trainer runs (`asearcher train --cpu`), in the docs beside this table.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402
from benchmarks.sequences import ScriptedTurns  # noqa: E402

OVERRIDES = {"web_qwq32b": ["agent.tools.backend=local", "agent.reward.metric=f1"]}
WHOLE = ("observation_tokens", "action_ranges", "rollout_log_probs", "text", "token_times", "turn_times")


def ray_bytes(obj) -> int:
    from ray._private.worker import global_worker

    return global_worker.get_serialization_context().serialize(obj).total_bytes


async def trajectory(agent, tokenizer, question: str, turns: int, max_len: int):
    from asearcher_plugin.engines.types import SamplingParams
    from asearcher_plugin.env import AgentExecutor

    engine = ScriptedTurns(tokenizer, question, turns)
    executor = AgentExecutor(agent, for_training=True)
    return await executor.run(question, "[]", SamplingParams(logprobs=0), max_len, tokenizer, engine)


def old_plan(lengths: list[int], micro_batches: int) -> list[list[int]]:
    """The plan before: exactly steps x accumulation micro-batches, balanced by tokens."""
    from openrlhf.utils.seqlen_balancing import get_seqlen_balanced_partitions

    return get_seqlen_balanced_partitions(lengths, micro_batches, equal_size=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--recipes", nargs="+", default=["web_qwq32b", "local_7b_long"])
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from asearcher_plugin.engines.tiny_model import ensure_tiny_model
    from asearcher_plugin.openrlhf.cpu import use_stand_ins
    from asearcher_plugin.openrlhf.micro_batches import cost, plan_steps
    from asearcher_plugin.recipe import Recipe
    from local_retriever.build import MANIFEST_FILE, BuildOptions, build_kb
    from local_retriever.sample import load_sample_questions
    from local_retriever.server_process import start_server, wait_healthy

    use_stand_ins()
    url = "http://127.0.0.1:5127"
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model("runs/tiny-model"))
    question = load_sample_questions()[0]["question"]
    kb = Path("runs/sample-kb-bm25")  # BM25 only: no dense encoding of the corpus
    if not (kb / MANIFEST_FILE).is_file():
        from local_retriever.sample import sample_dump_path

        build_kb(sample_dump_path(), kb, opts=BuildOptions(dense=False))
    server = start_server(kb, 5127, "bm25")
    rows, results, shapes = [], [], []
    try:
        wait_healthy(url, server)
        for name in args.recipes:
            recipe = Recipe.load(name, [*OVERRIDES.get(name, []), f"agent.tools.local.urls=[{url}]"])
            flags = recipe.check().args
            ranks = flags.actor.num_nodes * flags.actor.num_gpus_per_node
            per_rank = flags.rollout.batch_size * flags.rollout.n_samples_per_prompt // ranks
            steps = max(flags.rollout.batch_size * flags.rollout.n_samples_per_prompt // flags.train.batch_size, 1)
            gas = max(flags.train.batch_size // flags.train.micro_batch_size // ranks, 1)
            budget, max_len = int(flags.train.max_tokens_per_gpu), int(flags.data.max_len)
            shapes.append(
                f"`{name}` ({recipe.agent.agent_type}): one rank's share is {per_rank} trajectories of {ranks} ranks, "
                f"{steps} optimizer step(s), accumulation {gas}, budget {budget:,}"
            )
            for turns in args.turns:
                t = asyncio.run(trajectory(recipe.agent, tokenizer, question, turns, max_len))
                after = t.to_openrlhf()
                before = {**after, **{k: getattr(t, k) for k in WHOLE}}
                lengths = [len(s["observation_tokens"]) for s in t.sequences] * per_rank
                fixed = steps * gas
                old = old_plan(lengths, fixed) if len(lengths) >= fixed else [[i] for i in range(len(lengths))]
                new = plan_steps(lengths, steps, budget, packed=False)
                row = {
                    "recipe": name,
                    "turns": turns,
                    "sequences": len(t.sequences),
                    "bytes_before": ray_bytes(before),
                    "bytes_after": ray_bytes(after),
                    "rank_sequences": len(lengths),
                    "old_micro_batches": len(old),
                    "old_peak_tokens": max(cost([lengths[i] for i in m], False) for m in old),
                    "old_peak_sequences": max(len(m) for m in old),
                    "new_micro_batches": len(new),
                    "new_peak_tokens": max(cost([lengths[i] for i in m.indices], False) for m in new),
                    "optimizer_steps": len({m.step for m in new}),
                }
                results.append(row)
                print(row, flush=True)
                rows.append(
                    [
                        name,
                        turns,
                        row["sequences"],
                        f"{row['bytes_before']:,}",
                        f"{row['bytes_after']:,}",
                        f"{row['old_peak_tokens']:,} ({row['old_peak_sequences']} seq.)",
                        f"{row['new_peak_tokens']:,}",
                        f"{row['old_micro_batches']} -> {row['new_micro_batches']}",
                        row["optimizer_steps"],
                    ]
                )
    finally:
        server.terminate()
    header = [
        "recipe",
        "turns",
        "sequences / trajectory",
        "bytes / trajectory through Ray, before",
        "after",
        "peak tokens / micro-batch, before",
        "after (budget)",
        "micro-batches / update / rank",
        "optimizer steps / update",
    ]
    note = (
        "The recipes' agents, scripted turns on the sample KB (BM25), the tiny model's tokenizer, one trajectory per "
        "row; bytes: Ray's serialiser on the response dict, before with the whole trajectory's tokens, spans, "
        "log-probs, text and times beside the sequences; the update: every trajectory of a rank's share shaped like "
        "the measured one, tokens as the forward pads them; " + "; ".join(shapes)
    )
    print(publish("per_call_scale", header, rows, note, {"args": vars(args), "results": results}))


if __name__ == "__main__":
    main()
