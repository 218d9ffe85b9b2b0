"""A task where the agent's decisions matter, over a built knowledge base: what to search, whether to read the page,
when to answer without searching.

Three kinds of question, mixed in one dataset, each built from words of the KB and checked on it:

- `read` ("Word after WORD?"): WORD occurs in one passage of the whole KB; the answer is the word that follows it
  there. Where the search result's text (its first `--doc-chars` characters) shows that word, opening the page is a
  wasted turn (`needs_page` false); where it does not, the agent must open the page, whose first chunk
  (`--page-chars`) holds it (`needs_page` true). A search for the question ranks WORD's passage first (the KB's BM25).
- `both` ("Article with WORD1 and WORD2?"): each word occurs in exactly two passages, of two articles, and the two
  share exactly one article, the answer. A search for the whole question does not rank it first; a search for each
  word shows both of its articles in the top 2, so searching each word and comparing titles finds it.
- `none` ("Echo WORD?"): the answer is in the question; a search only costs (`decision_reward.py` charges each).

Questions are split by article (a `read` or `none` question's passage, a `both` question's answer), so no held-out
question's article was seen in training. `python benchmarks/decision_task.py KB_DIR TOKENIZER OUT_DIR` writes
`train.jsonl`, `rl.jsonl` and `heldout.jsonl` (rows `id`, `question`, `golden_answers`, `kind`, `title`, and for
`read` rows `needs_page`), a deterministic function of the KB, the tokenizer and the options.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.search_task import KEY_TOKENS, cap, learning_sides, passages, qid, write_sides  # noqa: E402

WORD = re.compile(r"\b[A-Za-z]{6,}\b")  # a whole long word (search_task's KEY also matches inside "7Wonders")
NEXT_WORD = re.compile(r"[ ,;:]{1,2}([A-Za-z]+)\b")  # the whole word right after, past a space or a comma
DOC_CHARS = 200  # what a search result shows of a passage: recipes/cpu_warm_start.yaml's tools.max_doc_chars
# the first chunk `access` shows (tools.page_chunk_chars), and a `read` question's word may be 2-4 tokens: words past
# a result's 200 characters and inside the first chunk (before the BM25 check), in the whole KB, numbered 86 at 1,500
# characters with KEY_TOKENS words, 191 at 2,500, and 425 at 2,500 with these; a page read still fits 2,048 tokens
PAGE_CHARS = 2500
READ_TOKENS = (2, 3, 4)
PER_ARTICLE = {"read": 6, "both": 3, "none": 2}  # questions per article and kind at most


def body_of(row: dict) -> str:
    return row["contents"].partition("\n")[2]


def token_counts(rows: list[dict], tokenizer) -> dict[str, int]:
    """Each long word of the KB's length in tokens: a `both` or `none` question's words are `KEY_TOKENS` long, so those
    questions are the same length, and every copy a small model makes stays short."""
    words = {w for r in rows for w in WORD.findall(body_of(r))}
    return {w: len(tokenizer.tokenize(" " + w)) for w in words}


def read_candidates(rows, df, tokens, pages, doc_chars, page_chars) -> list[dict]:
    out = []
    for row in rows:
        title, body = row["title"], body_of(row)
        for m in WORD.finditer(body):
            word = m.group(0)
            if df[word.lower()] != 1 or word.lower() in title.lower() or tokens[word] not in READ_TOKENS:
                continue
            after = NEXT_WORD.match(body, m.end())
            if not after:
                continue
            shown = after.end() <= doc_chars
            page = pages.get(title, "")
            # a whole word on the page too: "chloric acid" inside "hydrochloric acid" is not the question's word
            on_page = re.search(rf"\b{re.escape(body[m.start() : after.end()])}\b", page[:page_chars])
            if not shown and not on_page:
                continue  # past the page's first chunk: more than one page read, kept out of this task
            question = f"Word after {word}?"
            out.append(
                {"id": qid(question), "question": question, "golden_answers": [after.group(1)], "kind": "read",
                 "title": title, "needs_page": not shown, "word": word}
            )  # fmt: skip
    return out


def both_candidates(rows, tokens) -> list[dict]:
    articles, hits = defaultdict(set), Counter()
    for row in rows:
        for w in {w for w in WORD.findall(body_of(row))}:
            articles[w].add(row["title"])
            hits[w] += 1
    two = sorted(w for w, arts in articles.items() if len(arts) == 2 and hits[w] == 2 and tokens[w] == KEY_TOKENS)
    by_article = defaultdict(list)
    for w in two:
        for a in articles[w]:
            by_article[a].append(w)
    out = []
    for answer in sorted(by_article):
        words = by_article[answer]
        for i, w1 in enumerate(words):
            for w2 in words[i + 1 :]:
                if articles[w1] & articles[w2] == {answer} and answer.lower() not in f"{w1} {w2}".lower():
                    question = f"Article with {w1} and {w2}?"
                    out.append(
                        {"id": qid(question), "question": question, "golden_answers": [answer], "kind": "both",
                         "title": answer, "words": [w1, w2], "articles": sorted(articles[w1] | articles[w2])}
                    )  # fmt: skip
    return out


def none_candidates(rows, df, tokens) -> list[dict]:
    out = []
    for row in rows:
        for word in WORD.findall(body_of(row)):
            if df[word.lower()] == 1 and tokens[word] == KEY_TOKENS:
                question = f"Echo {word}?"
                out.append(
                    {"id": qid(question), "question": question, "golden_answers": [word], "kind": "none",
                     "title": row["title"]}
                )  # fmt: skip
    return out


def checked_on_the_kb(kb_dir: Path, read: list[dict], both: list[dict]) -> tuple[list[dict], list[dict]]:
    """Kept when the KB's BM25 does what the kind needs: a `read` question ranks WORD's article first; a `both`
    question's words each show both of their articles in the top 2, and the whole question does not rank the answer
    first (one search is not enough)."""
    from local_retriever.kb import KnowledgeBase

    kb = KnowledgeBase(kb_dir, "bm25")

    def titles(queries: list[str], k: int) -> list[list[str]]:
        return [[row["title"] for row, _ in kb.rows(found)] for found in kb.search(queries, k)]

    try:
        read_top = titles([r["question"] for r in read], 1)
        read = [r for r, top in zip(read, read_top) if top[:1] == [r["title"]]]
        whole = titles([r["question"] for r in both], 1)
        first = titles([r["words"][0] for r in both], 2)
        second = titles([r["words"][1] for r in both], 2)
    finally:
        kb.close()
    kept = []
    for r, top, a, b in zip(both, whole, first, second):
        arts_1 = set(r["articles"]) & set(a)
        if top[:1] != [r["title"]] and r["title"] in a and r["title"] in b and len(set(a)) == len(set(b)) == 2:
            if len(arts_1) == 2:  # word 1's two articles are the two it shows
                kept.append(r)
    return read, kept


def make_questions(
    kb_dir: Path, tokenizer, doc_chars: int = DOC_CHARS, page_chars: int = PAGE_CHARS, scale: int = 1
) -> list[dict]:
    """`scale`: the per-article caps multiplied (more questions of each article, the same kinds and checks)."""
    per_article = {kind: n * scale for kind, n in PER_ARTICLE.items()}
    rows = passages(kb_dir)
    df = Counter(w for r in rows for w in {w.lower() for w in WORD.findall(r["contents"])})
    tokens = token_counts(rows, tokenizer)
    with sqlite3.connect(kb_dir / "pages.sqlite") as con:
        pages = dict(con.execute("select title, contents from pages"))
    read = read_candidates(rows, df, tokens, pages, doc_chars, page_chars)
    # as many questions that need the page as that do not, per article
    read = cap([r for r in read if r["needs_page"]], per_article["read"] // 2) + cap(
        [r for r in read if not r["needs_page"]], per_article["read"] // 2
    )
    # BM25 checks are the slow part: a few candidates per article are enough
    both = cap(both_candidates(rows, tokens), 4 * per_article["both"])
    read, both = checked_on_the_kb(kb_dir, read, both)
    none = cap(none_candidates(rows, df, tokens), per_article["none"])
    return [*read, *cap(both, per_article["both"]), *none]


def per_kind(rows: list[dict], n: int) -> list[dict]:
    """At most `n` questions of each kind (`read` needing the page its own), taken round the articles in turn so that
    a capped kind still spans all of them."""
    out = []
    for kind in dict.fromkeys(kind_of(r) for r in rows):
        by_article = defaultdict(list)
        for r in rows:
            if kind_of(r) == kind:
                by_article[r["title"]].append(r)
        longest = max(map(len, by_article.values()))
        out += [r for i in range(longest) for q in by_article.values() for r in q[i : i + 1]][:n]
    return out


def kind_of(row: dict) -> str:
    return row["kind"] + ("+page" if row.get("needs_page") else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kb_dir", type=Path)
    ap.add_argument("tokenizer", help="the student model's folder: a question's words are counted in its tokens")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--doc-chars", type=int, default=DOC_CHARS, help="characters a search result shows")
    ap.add_argument("--page-chars", type=int, default=PAGE_CHARS, help="characters the first page read shows")
    ap.add_argument("--heldout", type=float, default=0.25)
    ap.add_argument("--rl-share", type=float, default=0.4)
    ap.add_argument(
        "--warm-scale", type=int, default=1, help="the warm start's side (train.jsonl) with this many times the "
        "questions per article; the RL and held-out sides as at 1"
    )  # fmt: skip
    ap.add_argument(
        "--warm-per-kind", type=int, default=0, help="the warm start's side with at most this many questions of each "
        "kind (0: no cap): at --warm-scale 20 the kinds differ up to 10x"
    )  # fmt: skip
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    rows = make_questions(args.kb_dir, tokenizer, args.doc_chars, args.page_chars)
    sides = learning_sides(rows, args.heldout, args.rl_share)
    if args.warm_scale > 1:  # the sides are by article (a hash of its title): the same articles, more questions
        more = make_questions(args.kb_dir, tokenizer, args.doc_chars, args.page_chars, args.warm_scale)
        sides["train"] = learning_sides(more, args.heldout, args.rl_share)["train"]
    if args.warm_per_kind:
        sides["train"] = per_kind(sides["train"], args.warm_per_kind)
    write_sides(args.out_dir, sides)
    counts = {name: dict(Counter(map(kind_of, side))) for name, side in sides.items()}
    print(json.dumps({"questions": counts, "articles": {n: len({r["title"] for r in s}) for n, s in sides.items()}}))


if __name__ == "__main__":
    main()
