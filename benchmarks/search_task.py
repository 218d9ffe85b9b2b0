"""A task where searching matters, over a built knowledge base: which article holds a word?

Each question names one word that only one passage of the whole KB holds, e.g. `Article with Royalists?`; its answer is
the title of that passage's article. The title is not in the question and not guessable from it; a search with the
question finds the passage (checked with the KB's own BM25: an article's passage is its top result), whose result
starts with the title (`Doc 1(Title: Anarchism) ...`), so an agent that searches with the question and copies the
title from the result is right. The questions are short and all the same number of tokens on purpose: the copies a
tiny model has to make (the question into its search, the title out of the result) stay short, and the word follows
`with`, a token met nowhere else in the prompt, so the search copies it by induction (see `copy_skill.py`); an answer
of several words gets F1's partial credit. Questions are split by article, so no held-out
question's article was seen in training: the held-out answers can only come from search.

`python benchmarks/search_task.py KB_DIR TOKENIZER OUT_DIR` writes `train.jsonl` and `heldout.jsonl` (rows `id`,
`question`, `golden_answers`, `title`), a deterministic function of the KB, the tokenizer and `--seed`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections import Counter
from pathlib import Path

KEY = re.compile(r"[A-Za-z]{6,}")  # long words: distinctive, and read by BM25 as themselves
KEY_TOKENS = 3  # every question's word is this many tokens, so every question is the same length
PER_ARTICLE = 8  # questions per article at most: a few long articles do not make the task


def passages(kb_dir: Path) -> list[dict]:
    with open(kb_dir / "passages.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def make_questions(kb_dir: Path, tokenizer, per_article: int = PER_ARTICLE) -> list[dict]:
    """Words of `KEY_TOKENS` tokens that one passage holds and no other (neither in its title nor holding it), kept
    when the KB's BM25 ranks a passage of the same article first for the question; `per_article` per article."""
    from local_retriever.kb import KnowledgeBase

    rows = passages(kb_dir)
    df = Counter(w for r in rows for w in {w.lower() for w in KEY.findall(r["contents"])})
    candidates = []
    for row in rows:
        title = row["title"]
        for word in KEY.findall(row["contents"].partition("\n")[2]):
            key, name = word.lower(), title.lower()
            if df[key] == 1 and key not in name and name not in key:
                if len(tokenizer.tokenize(" " + word)) == KEY_TOKENS:
                    candidates.append((title, f"Article with {word}?"))
    kb = KnowledgeBase(kb_dir, "bm25")
    try:
        # the agent asks with the question as the model wrote it: a teacher that searches the question finds it
        top = kb.search([q for _, q in candidates], 1)
        found = [kb.rows(hits)[0][0]["title"] if hits else None for hits in top]
    finally:
        kb.close()
    rows = [
        {"id": qid(question), "question": question, "golden_answers": [title], "title": title}
        for (title, question), got in zip(candidates, found)
        if got == title
    ]
    return cap(rows, per_article)


def qid(question: str) -> str:
    return hashlib.sha256(question.encode()).hexdigest()[:12]


def cap(rows: list[dict], per_article: int) -> list[dict]:
    """At most `per_article` rows per article (`title`), in order; a question met twice (a word twice in its passage)
    once."""
    taken, seen, out = Counter(), set(), []
    for r in rows:
        if taken[r["title"]] < per_article and r["id"] not in seen:
            taken[r["title"]] += 1
            seen.add(r["id"])
            out.append(r)
    return out


def split(rows: list[dict], heldout: float, seed: int) -> tuple[list[dict], list[dict]]:
    """By article: a held-out question's page is never in training."""

    def held(title: str) -> bool:
        digest = hashlib.sha256(f"{seed}:{title}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < heldout

    return [r for r in rows if not held(r["title"])], [r for r in rows if held(r["title"])]


def learning_split(rows: list[dict], heldout: float = 0.25, rl_share: float = 0.4) -> dict[str, list[dict]]:
    """Three sides, each article on one: the warm start's questions, RL's and the held-out ones. RL asks about
    articles the warm start never saw, or its reward would measure what SFT memorised rather than searching."""
    train, held = split(rows, heldout, 0)
    sft, rl = split(train, rl_share, 1)
    return {"sft": sft, "rl": rl, "heldout": held}


def learning_sides(rows: list[dict], heldout: float, rl_share: float) -> dict[str, list[dict]]:
    """`learning_split`'s sides under the file names the pages use: the warm start's side keeps the name `train`,
    since `sft-data --heldout` splits by a hash of dataset name and id."""
    sides = learning_split(rows, heldout, rl_share)
    return {"train": sides["sft"], "rl": sides["rl"], "heldout": sides["heldout"]}


def write_sides(out_dir: Path, sides: dict[str, list[dict]]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, side in sides.items():
        (out_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in side))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kb_dir", type=Path)
    ap.add_argument("tokenizer", help="the student model's folder: a question's word is counted in its tokens")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--per-article", type=int, default=PER_ARTICLE)
    ap.add_argument("--heldout", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--rl-share",
        type=float,
        default=0.0,
        help="write train.jsonl (the warm start's), rl.jsonl and heldout.jsonl instead, as learn_to_search.py splits "
        "them: this share of the training articles goes to RL only, so RL asks about articles the warm start never "
        "saw (--seed unused)",
    )
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    rows = make_questions(args.kb_dir, tokenizer, args.per_article)
    if args.rl_share > 0:
        sides = learning_sides(rows, args.heldout, args.rl_share)
    else:
        train, held = split(rows, args.heldout, args.seed)
        sides = {"train": train, "heldout": held}
    write_sides(args.out_dir, sides)
    print(json.dumps({name: len(side) for name, side in sides.items()}))


if __name__ == "__main__":
    main()
