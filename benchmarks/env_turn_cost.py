"""The agent environment's own cost per turn, with tools and the model taking no time at all.

One command: `python benchmarks/env_turn_cost.py [--trajectories 30] [--turns 64]`. `AgentExecutor.execute`
runs 64-turn trajectories (63 tool calls alternating search and paged access, then an answer)
with the tiny model's real tokenizer. The toolbox returns fixed Wikipedia documents at once and the
engine returns pre-tokenized scripted turns at once, so the time between two engine calls is what
the environment spends on a turn: parsing the action, formatting and tokenizing the feedback, and
its bookkeeping. Turn 1 against turn 63 shows whether that cost grows with the trajectory.

It also times `parse_action` on 200,000 characters of unclosed tags, against the regular-expression
parser it replaced (non-greedy matches rescanning to the end from every unclosed tag).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme_table import markdown_table, publish  # noqa: E402


def sample_articles(n: int = 12) -> list[tuple[str, str]]:
    from local_retriever.sample import sample_dump_path
    from local_retriever.wikitext import clean_wikitext
    from local_retriever.wikixml import iter_pages

    out = []
    for page in iter_pages(sample_dump_path()):
        if page.ns == 0 and not page.redirect:
            text = clean_wikitext(page.text)
            if len(text) > 20_000:
                out.append((page.title, text))
                if len(out) == n:
                    break
    return out


def instant_toolbox(articles):
    from asearcher_plugin.tools.base import ToolBox

    docs = [
        {"title": t, "url": f"https://en.wikipedia.org/wiki/{t.replace(' ', '_')}", "text": text[:3000]}
        for t, text in articles
    ]
    pages = {d["url"]: text for d, (_, text) in zip(docs, articles)}

    class Instant(ToolBox):
        async def _search(self, query, topk):
            return docs[:topk]

        async def _access(self, url):
            return pages.get(url)

    return Instant(), docs


class ScriptedEngine:
    """Pre-tokenized turns, returned at once; records when each call arrives."""

    def __init__(self, tokenizer, turns: list[str], logprobs: bool):
        from asearcher_plugin.engines.types import CompletionOutput, Logprob, RequestOutput

        self.outputs = []
        for text in turns:
            ids = tokenizer(text=text, add_special_tokens=False)["input_ids"]
            stop = next((s for s in ("</search>", "</access>", "</answer>") if text.endswith(s)), None)
            lps = [{t: Logprob(-0.5)} for t in ids] if logprobs else None
            self.outputs.append(RequestOutput("r", [], [CompletionOutput(0, text, ids, "stop", stop, lps)]))
        self.calls: list[float] = []

    async def generate(self, prompt_token_ids, sampling_params):
        self.calls.append(time.perf_counter())
        return self.outputs[len(self.calls) - 1]


def script(articles, docs, turns: int) -> list[str]:
    out = []
    for i in range(turns - 1):
        title, text = articles[i % len(articles)]
        thought = text[(i * 400) % 10_000 :][:400]
        if i % 2 == 0:
            out.append(f"<think>{thought}</think>\n<search> {title} {' '.join(thought.split()[:6])} </search>")
        else:
            out.append(f"<think>{thought}</think>\n<access> {docs[(i // 2) % len(docs)]['url']} </access>")
    out.append("<think>That settles it.</think>\n<answer> Luanda </answer>")
    return out


def run_style(tokenizer, articles, style: str, trajectories: int, turns: int, max_length: int) -> dict:
    from asearcher_plugin.engines.types import SamplingParams
    from asearcher_plugin.env import AgentExecutor
    from asearcher_plugin.settings.config import AgentConfig

    config = AgentConfig(agent_type="asearcher", max_turns=turns, max_new_tokens_per_turn=1024, feedback_style=style)
    config.tools.topk, config.tools.max_doc_chars = 3, 1500
    box, docs = instant_toolbox(articles)
    executor = AgentExecutor(config)
    executor._toolbox = lambda: box  # the instant toolbox instead of the configured KB servers
    turns_text = script(articles, docs, turns)
    params = SamplingParams(temperature=1.0, max_tokens=None, logprobs=1)
    per_turn: list[list[float]] = [[] for _ in range(turns)]
    lengths = []

    async def one() -> tuple[list[float], dict]:
        engine = ScriptedEngine(tokenizer, turns_text, logprobs=True)
        result = await executor.execute(
            "What is the capital of Angola?", '["Luanda"]', params, max_length, tokenizer, engine
        )
        ended = time.perf_counter()
        return [b - a for a, b in zip(engine.calls, engine.calls[1:] + [ended])], result

    for i in range(trajectories + 2):  # two warm-up trajectories
        gaps, result = asyncio.run(one())
        assert result["extra_logs"]["turns"] == turns and result["extra_logs"]["answered"] == 1.0, result["extra_logs"]
        assert not result["truncated"] and result["extra_logs"]["tool_errors"] == 0
        if i >= 2:
            for k, gap in enumerate(gaps):
                per_turn[k].append(gap * 1000)
            lengths.append(len(result["observation_tokens"]))
    flat = sorted(x for turn in per_turn for x in turn)
    return {
        "median_ms": statistics.median(flat),
        "p90_ms": flat[int(0.9 * (len(flat) - 1))],
        "by_turn_median_ms": [statistics.median(t) for t in per_turn],
        "tokens": statistics.median(lengths),
    }


def regex_parse(text: str, allowed=("search", "access", "answer")):
    """The parser before it was made linear, kept here as the baseline."""
    text = re.sub(r"<think>.*?</think>", " ", text, flags=re.S | re.I)
    blocks = re.findall(r"<(search|access|answer)>(.*?)</\1>", text, re.I | re.S)
    opened = re.findall(r"<(search|access|answer)>", text, re.I)
    return blocks, opened


def parse_times(size: int, with_regex: bool) -> list[dict]:
    from asearcher_plugin.agent.actions import parse_action

    rows = []
    for unit in ("<search>", "<think>", "<search><think>"):
        text = (unit * (size // len(unit) + 1))[:size]
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            parse_action(text)
            runs.append(time.perf_counter() - start)
        row = {"unit": unit, "chars": size, "linear_ms": statistics.median(runs) * 1000}
        if with_regex:
            start = time.perf_counter()
            regex_parse(text)
            row["regex_s"] = time.perf_counter() - start
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trajectories", type=int, default=30)
    ap.add_argument("--turns", type=int, default=64)
    ap.add_argument("--parse-chars", type=int, default=200_000)
    ap.add_argument("--skip-regex", action="store_true", help="do not time the old parser (about a minute)")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from asearcher_plugin.engines.tiny_model import ensure_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_tiny_model("runs/tiny-model")))
    articles = sample_articles()
    max_length = 1 << 20  # no trajectory is cut short: every one runs all its turns
    results, rows = {}, []
    for style in ("information", "chat"):
        r = results[style] = run_style(tokenizer, articles, style, args.trajectories, args.turns, max_length)
        t = r["by_turn_median_ms"]
        rows.append(
            [
                f"`feedback_style: {style}`",
                f"{r['median_ms']:.2f}",
                f"{r['p90_ms']:.2f}",
                f"{t[0]:.2f}",
                f"{t[len(t) // 2 - 1]:.2f}",
                f"{t[-2]:.2f}",
                f"{t[-1]:.2f}",
                f"{r['tokens']:,.0f}",
            ]
        )
        print(style, {k: v for k, v in r.items() if k != "by_turn_median_ms"}, flush=True)
    parse = parse_times(args.parse_chars, not args.skip_regex)
    parse_rows = [
        [
            f"`{p['unit']}` repeated",
            f"{p['regex_s']:.1f} s" if "regex_s" in p else "not run",
            f"{p['linear_ms']:.1f} ms",
        ]
        for p in parse
    ]
    parse_table = markdown_table(
        [f"{args.parse_chars:,} chars of unclosed tags", "regex parser (before)", "`parse_action` (linear)"],
        parse_rows,
    )
    note = (
        f"ms per turn of `AgentExecutor.execute` itself over {args.trajectories} trajectories of {args.turns} turns "
        f"(63 tool calls alternating search, 3 documents of 1,500 chars, and paged access, 5,000-char chunks; then "
        f"an answer), the tiny model's tokenizer, log-probs on; tools and the engine answer at once. Turn k = from "
        f"the k-th engine call to the next (the last: to the result). Columns turn 1/32/63/64 are medians at that "
        f"turn; turn 64 includes scoring and assembling the result; tokens = trajectory length at the end.\n\n"
        f"{parse_table}\n\nthe model's turn parsed once; the regex parser is the pre-linear one (non-greedy "
        f"`<think>.*?</think>` and `<(search|access|answer)>(.*?)</\\1>`), timed once"
    )
    print(
        publish(
            "env_turn_cost",
            ["case", "median ms/turn", "p90 ms/turn", "turn 1", "turn 32", "turn 63", "turn 64 (answer)", "tokens"],
            rows,
            note,
            {"turns": results, "parse_action": parse, "trajectories": args.trajectories},
        )
    )


if __name__ == "__main__":
    main()
