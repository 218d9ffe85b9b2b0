"""The decision task's teacher: a scripted policy that makes the task's decisions, and a share of them wrong.

For each kind of `decision_task.py` question it acts as a careful searcher would:

- `Echo WORD?`: answers WORD at once (with `--cue-copies`, "Echo WORD");
- `Word after WORD?`: searches WORD's question; answers from the result when it shows the next word, else opens the
  top result's page and answers from it;
- `Article with W1 and W2?`: searches W1, then W2 (with `--cue-copies`, "with W1" and "and W2", its think text
  naming no word: "the first word"), and answers the title both results show.

Each action is written `<search> query</search>`: no space before the closing tag. With one, the student's tokenizer
writes the space as a token of its own, which then preceded a closing tag 1,947 times in 1,975 in the teacher's
text, so the student learnt it as "close the tag now": a lone space sampled inside a think text was followed by a
closing tag (`<think>The result does not show </access>`), an invalid action.

A seeded share (`--mistakes`, 0.25) of (question, seed) pairs gets the decision wrong: a needless search before an
echo, a page opened when the result already showed the word, an answer guessed without the page the question needs,
an answer after one search of two. The first two cost only the tool charge of `decision_reward.py`; the last two are
usually wrong answers. So the warm start copies imperfect decisions, and RL has them to improve.

`python benchmarks/decision_teacher.py DATASET TOKENIZER KB_URL OUT --agent-config RECIPE --k 2` writes an
`asearcher eval` folder (`trajectories.jsonl` with the token ids, for `asearcher sft-data`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asearcher_plugin.agent.reference_policy import _INFO, ReferencePolicy, _count, _think_open  # noqa: E402
from benchmarks.decision_reward import ECHO_QUESTION, READ_QUESTION  # noqa: E402

MISTAKES = 0.25
_RESULT = re.compile(r"Doc \d+\(Title: ([^\n]*?)\) \[([^\]\n]*)\]")
_ASKED = {
    "none": ECHO_QUESTION,
    "read": READ_QUESTION,
    "both": re.compile(r"^Article with (\w+) and (\w+)\?$"),
}


def kind_of(question: str) -> tuple[str, tuple[str, ...]]:
    for kind, pattern in _ASKED.items():
        if m := pattern.match(question.strip()):
            return kind, m.groups()
    return "other", ()


class DecisionTeacher(ReferencePolicy):
    """`reply` per question kind (the module docstring); everything else as the scripted reference policy."""

    name = "decision teacher (scripted)"

    def __init__(self, tokenizer, agent_type: str = "asearcher", mistakes: float = MISTAKES, seed: int = 0,
                 read_phrase: bool = False, cue_copies: bool = False, **kw):  # fmt: skip
        if agent_type != "asearcher":
            raise ValueError("the decision teacher reads pages: agent_type asearcher")
        super().__init__(tokenizer, agent_type, wrong_rate=mistakes, seed=seed, **kw)
        # `Word after WORD?` answered "WORD next": once the model has written WORD, the next word is what followed
        # WORD in the result or page, the induction a copying model does (decision_reward scores the phrase's rest)
        self.read_phrase = read_phrase
        # every copy from the question written after the token it follows there, so induction makes it: an echo
        # answered (or, by mistake, searched) "Echo WORD", a `both` question's words searched "with W1" and "and W2"
        # (stopwords to the KB's BM25, so the results are those of W1 and W2), and no copy in the think text ("the
        # first word"). Without a cue the student garbled the second word (`<search> Gra </search>` for Grauman) and
        # gave an echo's answer from the system prompt; the words its think text named uncued got 0.00-0.12 of its
        # probability on held-out teacher text, and sampled, turned the next action to garble.
        self.cue_copies = cue_copies

    def _read_answer(self, word: str, after: str) -> str:
        return f"{word} {after}" if self.read_phrase else after

    def describe(self) -> dict:
        return {**super().describe(), "engine": self.name, "mistakes": self.wrong_rate}

    def reply(self, transcript: str, stops=(), sample_seed: int | None = None) -> str:
        question, history = self._split(transcript)
        kind, words = kind_of(question)
        opening = "" if _think_open(transcript) else "<think>"
        mistaken = self._wrong_on_purpose(question, sample_seed)
        blocks = _INFO.findall(history)
        searches = _count(history, "search")
        if kind == "none":
            if mistaken and not searches:
                query = f"Echo {words[0]}" if self.cue_copies else words[0]
                return f"{opening}I will search for it first.</think>\n<search> {query}</search>"
            answer = f"Echo {words[0]}" if self.cue_copies else words[0]
            return f"{opening}The answer is in the question.</think>\n<answer> {answer}</answer>"
        if kind == "read":
            after = re.compile(rf"\b{re.escape(words[0])}[ ,;:]{{1,2}}([A-Za-z]+)\b")
            if not searches:
                return f"{opening}I will search for the word.</think>\n<search> {question}</search>"
            if len(blocks) > 1 and (read := after.search(blocks[-1])):
                answer = self._read_answer(words[0], read.group(1))
                return f"{opening}The page shows the word after it.</think>\n<answer> {answer}</answer>"
            shown = after.search(blocks[0]) if blocks else None
            titles = _RESULT.findall(blocks[0]) if blocks else []
            open_page = not shown if not mistaken else bool(shown)  # a mistake: the other choice
            if open_page and titles and not _count(history, "access"):
                note = "The result does not show the word after it" if not shown else "I will check the page"
                return f"{opening}{note}; I will read the page.</think>\n<access> {titles[0][0]}</access>"
            if shown:
                answer = self._read_answer(words[0], shown.group(1))
                return f"{opening}The result shows the word after it.</think>\n<answer> {answer}</answer>"
            guess = next(iter(re.findall(r"\b[A-Z][a-z]{3,}\b", blocks[0] if blocks else "")), "unknown")
            answer = self._read_answer(words[0], guess)
            return f"{opening}I guess without reading the page.</think>\n<answer> {answer}</answer>"
        if kind == "both":
            if searches < (1 if mistaken else 2):
                word = words[searches]
                if self.cue_copies:
                    which, query = ("first", "second")[searches], f"{('with', 'and')[searches]} {word}"
                    return f"{opening}I will search for the {which} word.</think>\n<search> {query}</search>"
                return f"{opening}I will search for {word}.</think>\n<search> {word}</search>"
            seen = [{t for t, _ in _RESULT.findall(b)} for b in blocks]
            common = set.intersection(*seen) if len(seen) > 1 else set()
            answer = sorted(common)[0] if common else (sorted(seen[0])[0] if seen and seen[0] else "unknown")
            return f"{opening}The title in both results.</think>\n<answer> {answer}</answer>"
        return super().reply(transcript, stops, sample_seed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("tokenizer")
    ap.add_argument("kb_url")
    ap.add_argument("out", type=Path)
    ap.add_argument("--agent-config", required=True, help="the recipe whose agent section the student trains with")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--mistakes", type=float, default=MISTAKES)
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--read-phrase", action="store_true", help="answer `Word after WORD?` with 'WORD next'")
    ap.add_argument(
        "--cue-copies", action="store_true", help="answer `Echo WORD?` with 'Echo WORD' and search a `both` "
        "question's words as 'with W1' and 'and W2'"
    )  # fmt: skip
    ap.add_argument("--set", action="append", default=[], help="an agent setting over the recipe's (KEY=VALUE)")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from asearcher_plugin.eval.datasets import load_dataset
    from asearcher_plugin.eval.runner import run_eval
    from asearcher_plugin.settings.config import load_config, override_agent_config

    sets = [*args.set, f"agent.tools.local.urls=[{args.kb_url}]"]
    config = override_agent_config(load_config(args.agent_config), sets)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    items = load_dataset(str(args.dataset))
    teacher = DecisionTeacher(
        tokenizer,
        config.agent_type,
        args.mistakes,
        read_phrase=args.read_phrase,
        cue_copies=args.cue_copies,
        prompt_template=config.prompt_template,
    )
    asyncio.run(run_eval(items, config, teacher, tokenizer, args.out, k=args.k, max_length=args.max_length))
    print(json.dumps(json.loads((args.out / "metrics.json").read_text())["datasets"]["overall"]["f1"]))


if __name__ == "__main__":
    main()
