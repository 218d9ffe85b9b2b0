"""A built knowledge base opened for search: passages, pages, dense/BM25/hybrid retrieval."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from .hybrid import rrf_fuse
from .manifest import Manifest
from .pages import PAGES_FILE, PageStore
from .store import OFFSETS_FILE, PassageStore

RetrieverName = Literal["dense", "bm25", "hybrid"]
HYBRID_DEPTH = 50  # candidates taken from each retriever before fusion

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """Queries made ready for the index: embeddings (dense, hybrid) and BM25 token ids (bm25, hybrid)."""

    n: int
    emb: np.ndarray | None
    tokens: list[list[int]] | None


class KnowledgeBase:
    def __init__(
        self,
        kb_dir: Path,
        retriever: RetrieverName = "dense",
        ef_search: int | None = None,
        nprobe: int | None = None,
        mmap_index: bool = False,
        device: str | None = None,
        int8_queries: bool = False,
        faiss_gpu: bool = False,
    ):
        self.dir = Path(kb_dir)
        self.manifest = Manifest.load(self.dir)
        self.retriever = retriever
        self.passages = PassageStore(self.manifest.corpus_path(self.dir), self.dir / OFFSETS_FILE)
        pages = self.dir / PAGES_FILE
        self.pages = PageStore(pages) if pages.is_file() else None
        self.dense = self.encoder = self.bm25 = None
        if retriever in ("dense", "hybrid"):
            if not self.manifest.dense_index:
                raise ValueError(f"{kb_dir} has no dense index; rebuild with a dense index or use --retriever bm25")
            from .dense import DenseIndex
            from .encoder import Encoder

            self.dense = DenseIndex(self.dir / self.manifest.dense_index, ef_search, nprobe, mmap_index, faiss_gpu)
            self.encoder = Encoder(self.manifest.encoder, device=device)
            if int8_queries:
                self.encoder.quantize_int8()
            if self.encoder.dim != self.dense.dim:
                raise ValueError(
                    f"encoder dim {self.encoder.dim} != index dim {self.dense.dim}: wrong --encoder for this index"
                )
        if retriever in ("bm25", "hybrid"):
            if not self.manifest.bm25_index:
                raise ValueError(f"{kb_dir} has no BM25 index; rebuild without --no-bm25 or use --retriever dense")
            from .sparse import BM25Index

            self.bm25 = BM25Index(self.dir / self.manifest.bm25_index)
        log.info("opened %s: %d passages, %s retriever", self.dir, len(self.passages), retriever)

    def search(self, queries: list[str], topk: int) -> list[list[tuple[int, float]]]:
        """Row positions and scores, best first, for each query (one batch through the encoder and index)."""
        return self.search_prepared(self.prepare(queries), topk)

    # The server runs search in two stages on two threads, so the encoder works on the next batch
    # while the index searches this one: `prepare` (encoder pass, BM25 tokenisation), then
    # `search_prepared` (FAISS and BM25 search, fusion) on what `join` made of one or more prepared batches.

    def prepare(self, queries: list[str]) -> Prepared:
        emb = self.encoder.encode(queries, "query") if self.encoder is not None and queries else None
        tokens = self.bm25.tokenize(queries) if self.bm25 is not None and queries else None
        return Prepared(len(queries), emb, tokens)

    @staticmethod
    def join(parts: list[Prepared]) -> Prepared:
        if len(parts) == 1:
            return parts[0]
        embs = [p.emb for p in parts if p.emb is not None]
        tokens = [t for p in parts if p.tokens is not None for t in p.tokens]
        return Prepared(
            sum(p.n for p in parts),
            np.concatenate(embs) if embs else None,
            tokens if any(p.tokens is not None for p in parts) else None,
        )

    def search_prepared(self, prepared: Prepared, topk: int) -> list[list[tuple[int, float]]]:
        if not prepared.n:
            return []
        if self.retriever == "dense":
            scores, ids = self.dense.search(prepared.emb, topk)
            return [_pairs(i, s) for i, s in zip(ids, scores)]
        if self.retriever == "bm25":
            scores, ids = self.bm25.search_tokens(prepared.tokens, topk)
            return [_pairs(i, s) for i, s in zip(ids, scores)]
        depth = max(topk, HYBRID_DEPTH)
        _, dense_ids = self.dense.search(prepared.emb, depth)
        _, sparse_ids = self.bm25.search_tokens(prepared.tokens, depth)
        out = []
        for d, s in zip(dense_ids, sparse_ids):
            ids, scores = rrf_fuse([d, s], topk)
            out.append(list(zip(ids, scores)))
        return out

    def rows(self, hits: list[tuple[int, float]]) -> list[tuple[dict, float]]:
        return [(self.passages.get(i), s) for i, s in hits]

    def access(self, url_or_title: str) -> dict | None:
        return self.pages.lookup(url_or_title) if self.pages else None

    def describe(self) -> dict:
        m = self.manifest
        return {
            "corpus_size": len(self.passages),
            "pages": self.pages.size if self.pages else 0,
            "retriever": self.retriever,
            "index_type": self.dense.kind if self.dense else "BM25",
            "faiss_factory": m.faiss_factory if self.dense else None,
            "index_params": self.dense.params if self.dense else {},
            "encoder": self.encoder.describe() if self.encoder else None,
            "source": m.source,
            "manifest_sha256": m.identity_sha256(),
        }

    def close(self) -> None:
        self.passages.close()


def _pairs(ids: np.ndarray, scores: np.ndarray) -> list[tuple[int, float]]:
    return [(int(i), float(s)) for i, s in zip(ids, scores) if i >= 0]
