"""A task where searching matters, over a built knowledge base: cloze questions on its passages.

Each question quotes one sentence of a passage with a year blanked out, and names the article, e.g. `Anarchism: "The
term "anarchist" first entered the English language in ____, during the English Civil War, ..." Which year fills the
blank?`. The year is not in the question and not guessable from it; a search with the question finds the passage
(the sentence is quoted), and the year stands in the results right after the words the question quotes. Questions
are split by article, so no held-out question's page was seen in training: the held-out answers can only come from
search.

`python benchmarks/search_task.py KB_DIR OUT_DIR` writes `train.jsonl` and `heldout.jsonl` (rows `id`, `question`,
`golden_answers`, `title`), a deterministic function of the KB and `--seed`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

YEAR = re.compile(r"\b(1[0-9]{3}|20[0-2][0-9])\b")
SENTENCE = re.compile(r"(?<=[.!?])\s+")


def passages(kb_dir: Path):
    with open(kb_dir / "passages.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            title, _, text = row["contents"].partition("\n")
            yield title.strip('"'), text


def cloze(sentence: str) -> tuple[str, str] | None:
    """The sentence with its one year blanked, and the year; None when it holds no year or several."""
    years = YEAR.findall(sentence)
    if len(years) != 1 or not 60 <= len(sentence) <= 180 or "\n" in sentence:
        return None
    year = years[0]
    before = sentence[: sentence.index(year)].strip()
    if len(before.split()) < 4:  # too little context before the blank to find the place in the results
        return None
    return YEAR.sub("____", sentence, count=1), year


def make_questions(kb_dir: Path, per_article: int = 6) -> list[dict]:
    rows, taken = [], {}
    for title, text in passages(kb_dir):
        for sentence in SENTENCE.split(text):
            made = cloze(sentence.strip())
            if made is None or taken.get(title, 0) >= per_article:
                continue
            blanked, year = made
            taken[title] = taken.get(title, 0) + 1
            question = f'{title}: "{blanked}" Which year fills the blank?'
            qid = hashlib.sha256(question.encode()).hexdigest()[:12]
            rows.append({"id": qid, "question": question, "golden_answers": [year], "title": title})
    return rows


def split(rows: list[dict], heldout: float, seed: int) -> tuple[list[dict], list[dict]]:
    """By article: a held-out question's page is never in training."""

    def held(title: str) -> bool:
        digest = hashlib.sha256(f"{seed}:{title}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < heldout

    return [r for r in rows if not held(r["title"])], [r for r in rows if held(r["title"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kb_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--per-article", type=int, default=6)
    ap.add_argument("--heldout", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    train, held = split(make_questions(args.kb_dir, args.per_article), args.heldout, args.seed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("heldout", held)):
        (args.out_dir / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps({"train": len(train), "heldout": len(held)}))


if __name__ == "__main__":
    main()
