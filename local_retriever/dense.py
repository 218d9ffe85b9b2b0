"""Dense index: corpus embeddings in resumable shards, then a FAISS index from a factory string.

Trade-offs (d = 768, 21M passages; see docs/kb.md): `Flat` is exact and 3 KB a passage; `HNSW32`
adds 256 B for ~10x faster queries at recall set by efSearch; `HNSW32,SQ8` cuts vectors to 1 B a
dimension; `IVF4096,PQ64` fits in ~2 GB but needs training and a tuned nprobe.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import faiss
import numpy as np

SHARD_PATTERN = "emb_{:06d}.npy"


def shard_ranges(n: int, shard_size: int) -> list[tuple[int, int]]:
    return [(s, min(s + shard_size, n)) for s in range(0, n, shard_size)]


def encode_shards(
    texts: Callable[[int, int], Iterable[str]],
    n: int,
    encode: Callable[[list[str]], np.ndarray],
    shard_dir: Path,
    shard_size: int,
    on_progress: Callable[[int], None] = lambda k: None,
) -> list[Path]:
    """Encodes rows [0, n) shard by shard; a shard already on disk with the right row count is kept.

    Each shard is written to a temporary name and renamed, so a crash never leaves a shard that
    looks finished but is not.
    """
    shard_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, (start, stop) in enumerate(shard_ranges(n, shard_size)):
        path = shard_dir / SHARD_PATTERN.format(k)
        paths.append(path)
        if _rows(path) == stop - start:
            on_progress(stop - start)
            continue
        chunk: list[str] = []
        parts = []
        for text in texts(start, stop):
            chunk.append(text)
            if len(chunk) == 256:
                parts.append(encode(chunk))
                on_progress(len(chunk))
                chunk = []
        if chunk:
            parts.append(encode(chunk))
            on_progress(len(chunk))
        tmp = path.with_suffix(".tmp.npy")
        with open(tmp, "wb") as fh:
            np.save(fh, np.concatenate(parts).astype(np.float32))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    return paths


def _rows(path: Path) -> int:
    """Rows of a finished shard, -1 if it is missing or unreadable (e.g. cut by a power loss)."""
    try:
        return np.load(path, mmap_mode="r").shape[0]
    except (OSError, ValueError):
        return -1


def build_index(shards: list[Path], factory: str, metric: str = "ip", train_size: int = 262_144) -> faiss.Index:
    """Builds a FAISS index over the shards in order, so FAISS id = corpus row position."""
    dim = np.load(shards[0], mmap_mode="r").shape[1]
    faiss_metric = faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2
    try:
        index = faiss.index_factory(dim, factory, faiss_metric)
    except RuntimeError as exc:
        raise ValueError(f"invalid FAISS factory string {factory!r}: {exc}") from None
    if not index.is_trained:
        sample = _training_sample(shards, train_size)
        try:
            index.train(sample)
        except RuntimeError as exc:
            raise ValueError(
                f"FAISS index {factory!r} could not be trained on {len(sample)} vectors "
                f"(IVF needs at least ~39 vectors a centroid; choose fewer lists or Flat/HNSW): {exc}"
            ) from None
    for path in shards:
        index.add(np.ascontiguousarray(np.load(path)))
    return index


def _training_sample(shards: list[Path], size: int) -> np.ndarray:
    arrays = [np.load(p, mmap_mode="r") for p in shards]
    total = sum(len(a) for a in arrays)
    take = min(size, total)
    # A uniform random sample, not the first `size` rows: wiki dumps are sorted by title.
    rows = np.sort(np.random.default_rng(0).choice(total, size=take, replace=False))
    starts = np.cumsum([0] + [len(a) for a in arrays])
    out = np.empty((take, arrays[0].shape[1]), dtype=np.float32)
    for j, r in enumerate(rows):
        k = int(np.searchsorted(starts, r, side="right") - 1)
        out[j] = arrays[k][r - starts[k]]
    return out


def write_index(index: faiss.Index, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    faiss.write_index(index, str(tmp))
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def to_gpus(index: faiss.Index, kind: str) -> faiss.Index:
    """The index copied to every GPU FAISS sees (sharded when it does not fit one), or a reason why not."""
    if not hasattr(faiss, "StandardGpuResources"):
        raise ValueError(
            f"--faiss-gpu: this faiss ({faiss.__version__}) is built without GPU support; install a GPU build "
            "(faiss-gpu-cu12 from PyPI, or conda's faiss-gpu) in place of faiss-cpu"
        )
    if "HNSW" in kind:
        raise ValueError(f"--faiss-gpu: FAISS has no GPU version of {kind}; build a Flat or IVF index for GPUs")
    if faiss.get_num_gpus() == 0:
        raise ValueError("--faiss-gpu: FAISS sees no GPU")
    options = faiss.GpuMultipleClonerOptions()
    options.shard, options.useFloat16 = True, True  # shards across the GPUs; float16 halves the memory
    return faiss.index_cpu_to_all_gpus(index, co=options)


class DenseIndex:
    """A loaded FAISS index with query-time knobs; concurrent searches on a CPU index are safe."""

    def __init__(
        self,
        path: Path,
        ef_search: int | None = None,
        nprobe: int | None = None,
        mmap: bool = False,
        gpu: bool = False,
    ):
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
        self.path = Path(path)
        self.index = faiss.read_index(str(path), flags)
        self.ntotal = self.index.ntotal
        self.dim = self.index.d
        self.kind = type(faiss.downcast_index(self.index)).__name__
        if gpu:
            self.index = to_gpus(self.index, self.kind)
        self.params = {}
        params = faiss.ParameterSpace()
        if ef_search is not None:
            params.set_index_parameter(self.index, "efSearch", int(ef_search))
            self.params["efSearch"] = int(ef_search)
        if nprobe is not None:
            params.set_index_parameter(self.index, "nprobe", int(nprobe))
            self.params["nprobe"] = int(nprobe)
        # faiss 1.15 only switches flat search to BLAS above 128000 / d queries; below that every
        # query scans the whole database alone, several times slower for the small batches a
        # server sees (measured in benchmarks/server_throughput.py).
        faiss.cvar.distance_compute_blas_threshold = 4

    def search(self, emb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, self.ntotal)
        scores, ids = self.index.search(np.ascontiguousarray(emb, dtype=np.float32), k)
        return scores, ids
