"""BM25 with bm25s: memory-mapped at serve time, one saved tokenizer for index and queries.

The tokenizer (lower-casing, English stop words, Snowball stemming) is saved beside the index
and reloaded for queries, so a query word is stemmed exactly as its passage words were.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import bm25s
import numpy as np
import Stemmer

# bm25s sets its logger to DEBUG when imported, above whatever level the command asked for (`--log-level`)
logging.getLogger("bm25s").setLevel(logging.NOTSET)


def _tokenizer() -> bm25s.tokenization.Tokenizer:
    return bm25s.tokenization.Tokenizer(lower=True, stopwords="en", stemmer=Stemmer.Stemmer("english"))


def build_bm25(texts: Iterable[str], n: int, out_dir: Path, show_progress: bool = True) -> None:
    """Indexes `n` texts in order (BM25 id = corpus row position) and saves index and tokenizer.

    Token ids for the whole corpus are held in RAM while indexing (about 4 bytes a token).
    """
    tok = _tokenizer()
    ids = tok.tokenize(texts, update_vocab=True, return_as="ids", show_progress=show_progress, length=n)
    model = bm25s.BM25()
    model.index(bm25s.tokenization.Tokenized(ids=ids, vocab=tok.get_vocab_dict()), show_progress=show_progress)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir))
    tok.save_vocab(str(out_dir))
    tok.save_stopwords(str(out_dir))


class BM25Index:
    def __init__(self, path: Path, mmap: bool = True):
        self.path = Path(path)
        self.model = bm25s.BM25.load(str(path), mmap=mmap, show_progress=False)
        self.tokenizer = _tokenizer()
        self.tokenizer.load_vocab(str(path))
        self.tokenizer.load_stopwords(str(path))
        self.ntotal = int(self.model.scores["num_docs"])

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids) of shape (len(queries), k); ids are -1 where a query matched nothing."""
        return self.search_tokens(self.tokenize(queries), k)

    def tokenize(self, queries: list[str]) -> list[list[int]]:
        """Token ids of each query, as the index's words were stemmed (the server's first stage)."""
        return self.tokenizer.tokenize(queries, update_vocab=False, return_as="ids", show_progress=False)

    def search_tokens(self, tokens: list[list[int]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """`search` for queries already tokenized; each query is scored on its own, whatever else is in the batch."""
        k = min(k, self.ntotal)
        ids = np.full((len(tokens), k), -1, dtype=np.int64)
        scores = np.zeros((len(tokens), k), dtype=np.float32)
        # bm25s rejects empty queries; a query made only of stop words or unknown words finds nothing.
        rows = [r for r, q in enumerate(tokens) if q]
        if rows:
            docs, sc = self.model.retrieve([tokens[r] for r in rows], k=k, show_progress=False, n_threads=1)
            for j, r in enumerate(rows):
                hit = sc[j] > 0
                n = int(hit.sum())
                ids[r, :n] = docs[j][hit]
                scores[r, :n] = sc[j][hit]
        return scores, ids
