"""What a 128-turn trajectory costs the trainer, by how it is cut into training sequences.

One command: `python benchmarks/sequences.py`. The workloads are the agents of the two long-horizon recipes on the
sample KB with the tiny model's tokenizer: `web_qwq32b`'s reasoning agent (prompt rebuilt from the question and the
last 25,000 characters of history) and `local_7b_long`'s `asearcher` agent (ASearcher's observation format, page
chunks replaced by stubs once summarised), each with its recipe's per-call budget (`data.max_len`). The model's turns
are scripted as ASearcher's agents behave: search, summarise the results, open the first result, summarise each page
chunk as it comes, search again, answer at turn 128. Every call is recorded once and counted three ways:

- per-call, merged (`training_sequences: per_call`): the plugin's sequences, as ASearcher builds them;
- per-call, one sequence per call: every call's context and output trained on its own (no merging);
- one growing sequence (`trajectory`, the `asearcher` agent only): stubs cannot replace chunks the model already
  read, so every chunk stays whole; its length is what `--data.max_len` would have to be for the whole trajectory.

Tokens trained is the sum of the lengths of the sequences the trainer gets (the forward and backward cost); the
loss tokens (what the model generated) are the same in every mode.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import publish  # noqa: E402

SUMMARY = "I read this part and note what bears on the question, to use it in the answer later.</think>"
_DOC_URL = re.compile(r"\[Doc \d+\]\((\S+?)\):")


class ScriptedTurns:
    """ASearcher's behaviour, scripted from what the prompt shows; vLLM-shaped outputs with log-probs."""

    def __init__(self, tokenizer, question: str, turns: int):
        self.tokenizer, self.question, self.turns = tokenizer, question, turns
        self.calls: list[tuple[int, int]] = []  # (context tokens, generated tokens) of every call
        self.searched = 0

    async def generate(self, prompt_token_ids, params):
        from asearcher_plugin.engines.types import CompletionOutput, Logprob, RequestOutput

        text = self.tokenizer.decode(prompt_token_ids[-4000:])
        if len(self.calls) == self.turns - 1:
            out = "<think>I have enough.</think>\n<answer>unknown</answer>"
        elif list(params.stop or []) == ["</think>"]:  # a block was just shown: the agent asks for its summary
            out = SUMMARY
        elif (urls := _DOC_URL.findall(text)) and "<access>" not in text[text.rfind("[Doc 1]") :]:
            out = f"<think>The first result looks useful.</think>\n<access>{urls[0]}</access>"
        else:
            self.searched += 1
            words = self.question.split()
            out = f"<think>I search again.</think>\n<search>{' '.join(words[: 3 + self.searched % 6])}</search>"
        ids = self.tokenizer(text=out, add_special_tokens=False)["input_ids"]
        self.calls.append((len(prompt_token_ids), len(ids)))
        stop = next((s for s in params.stop or [] if out.endswith(s)), None)
        logprobs = [{t: Logprob(-1.0)} for t in ids]
        return RequestOutput("", list(prompt_token_ids), [CompletionOutput(0, out, ids, "stop", stop, logprobs)])


async def one(config, tokenizer, question: str, turns: int, max_len: int):
    from asearcher_plugin.engines.types import SamplingParams
    from asearcher_plugin.env import AgentExecutor

    engine = ScriptedTurns(tokenizer, question, turns)
    executor = AgentExecutor(config, for_training=True)
    out = await executor.execute(question, "[]", SamplingParams(logprobs=0), max_len, tokenizer, engine)
    return out, engine


WORKLOADS = {  # recipe, overrides: the agents of the two long-horizon recipes, on the sample KB
    "web_qwq32b (asearcher-reasoning)": ("web_qwq32b", ["agent.tools.backend=local", "agent.reward.metric=f1"]),
    "local_7b_long (asearcher, page stubs)": ("local_7b_long", []),
}


def measure(name: str, recipe_name: str, overrides: list[str], questions: list[str], turns: int, url: str) -> list:
    from transformers import AutoTokenizer

    from asearcher_plugin.engines.tiny_model import ensure_tiny_model
    from asearcher_plugin.recipe import Recipe

    recipe = Recipe.load(recipe_name, [*overrides, f"agent.tools.local.urls=[{url}]"])
    agent, max_len = recipe.agent, int(recipe.openrlhf["data.max_len"])
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model("runs/tiny-model"))
    rows = []
    for i, q in enumerate(questions, 1):
        out, engine = asyncio.run(one(agent, tokenizer, q, turns, max_len))
        seqs = [len(s["observation_tokens"]) for s in out["sequences"]]
        row = {
            "turns": len(engine.calls),
            "truncated": bool(out["truncated"]),
            "sequences": len(seqs),
            "merged_tokens": sum(seqs),
            "longest": max(seqs),
            "per_call_tokens": sum(c + g for c, g in engine.calls),
            "generated": sum(g for _, g in engine.calls),
            "max_len": max_len,
        }
        if agent.agent_type == "asearcher":  # one growing sequence of the same turns, uncapped: how long it gets
            single = agent.model_copy(update={"training_sequences": "trajectory"})
            whole, whole_engine = asyncio.run(one(single, tokenizer, q, row["turns"], 10**9))  # the same turns
            row["single_tokens"] = len(whole["observation_tokens"])
            row["single_generated"] = sum(g for _, g in whole_engine.calls)
        rows.append(row)
        print(f"{name}, trajectory {i}/{len(questions)}: {row}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trajectories", type=int, default=4, help="sample questions, one trajectory each")
    ap.add_argument("--turns", type=int, default=128)
    args = ap.parse_args()

    from local_retriever.build import ensure_sample_kb
    from local_retriever.sample import load_sample_questions
    from local_retriever.server_process import start_server, wait_healthy

    questions = [q["question"] for q in load_sample_questions()[: args.trajectories]]
    url = "http://127.0.0.1:5126"
    server = start_server(ensure_sample_kb(Path("runs/sample-kb")), 5126, "bm25")
    results = {}
    try:
        wait_healthy(url, server)
        for name, (recipe, overrides) in WORKLOADS.items():
            results[name] = measure(name, recipe, overrides, questions, args.turns, url)
    finally:
        server.terminate()

    def mean(rows, key):
        return statistics.mean(r[key] for r in rows)

    table = []
    for name, rows in results.items():
        merged = mean(rows, "merged_tokens")
        cut = sum(r["truncated"] for r in rows)
        reached = f"{mean(rows, 'turns'):.0f}" + (f" ({cut} of {len(rows)} truncated)" if cut else "")
        budget = f"{rows[0]['max_len']:,} per call"
        table.append(
            [
                name,
                budget,
                reached,
                "per-call, merged",
                f"{mean(rows, 'sequences'):.1f}",
                f"{merged:,.0f}",
                "1.00x",
                f"{mean(rows, 'longest'):,.0f}",
                f"{mean(rows, 'generated'):,.0f}",
            ]
        )
        calls = mean(rows, "per_call_tokens")
        table.append(
            [
                name,
                budget,
                reached,
                "per-call, one sequence per call",
                f"{mean(rows, 'turns'):.1f}",
                f"{calls:,.0f}",
                f"{calls / merged:.2f}x",
                "",
                f"{mean(rows, 'generated'):,.0f}",
            ]
        )
        if "single_tokens" in rows[0]:
            single = mean(rows, "single_tokens")
            table.append(
                [
                    name,
                    "uncapped",
                    reached,
                    "one growing sequence, chunks whole",
                    "1",
                    f"{single:,.0f}",
                    f"{single / merged:.2f}x",
                    f"{single:,.0f}",
                    f"{mean(rows, 'single_generated'):,.0f}",
                ]
            )
    header = [
        "agent",
        "budget",
        "turns",
        "training sequences",
        "sequences / trajectory",
        "tokens trained",
        "vs merged",
        "longest sequence",
        "loss tokens",
    ]
    note = (
        f"The two long-horizon recipes' agents on the sample KB (BM25), the tiny model's tokenizer, scripted turns "
        f"(search, summarise the results, open the first result, summarise each chunk as it comes, search again, "
        f"answer at turn {args.turns}); means over {len(questions)} trajectories (sample questions); tokens trained "
        "is the sum of the sequence lengths the trainer gets per trajectory"
    )
    print(publish("sequences", header, table, note, {"args": vars(args), "results": results}))


if __name__ == "__main__":
    main()
