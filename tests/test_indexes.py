"""Dense (real MiniLM encoder, real FAISS), BM25 (bm25s) and hybrid retrieval."""

import json

import faiss
import numpy as np
import pytest

from local_retriever.build import BuildOptions, build_kb
from local_retriever.dense import DenseIndex, build_index, encode_shards
from local_retriever.encoder import Encoder, EncoderConfig
from local_retriever.hybrid import rrf_fuse
from local_retriever.kb import KnowledgeBase


@pytest.fixture(scope="module")
def encoder():
    return Encoder(EncoderConfig())


def test_encoder_pooling_prefix_and_normalisation(encoder):
    assert encoder.pooling == "mean" and encoder.dim == 384
    v = encoder.encode(["who discovered relativity", "capital of Angola"])
    assert v.shape == (2, 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    prefixed = Encoder(EncoderConfig(query_prefix="query: ", passage_prefix="passage: "))
    q = prefixed.encode(["capital of Angola"], "query")
    p = prefixed.encode(["capital of Angola"], "passage")
    assert np.allclose(q, encoder.encode(["query: capital of Angola"]), atol=1e-5)
    assert np.allclose(p, encoder.encode(["passage: capital of Angola"]), atol=1e-5)
    cls = Encoder(EncoderConfig(pooling="cls", normalize=False)).encode(["capital of Angola"])
    assert not np.allclose(cls, v[1:2], atol=1e-3) and abs(np.linalg.norm(cls) - 1) > 1e-3


def test_encoding_resumes_without_redoing_finished_shards(tmp_path, encoder):
    texts = [f"passage number {i} about topic {i % 5}" for i in range(50)]
    calls = []

    def encode(batch):
        calls.append(len(batch))
        if len(calls) == 3:
            raise RuntimeError("simulated crash")
        return encoder.encode(batch, "passage")

    with pytest.raises(RuntimeError):
        encode_shards(lambda a, b: texts[a:b], 50, encode, tmp_path, shard_size=10)
    assert sorted(p.name for p in tmp_path.glob("emb_*.npy")) == ["emb_000000.npy", "emb_000001.npy"]
    assert not list(tmp_path.glob("*.tmp.npy"))
    calls.clear()
    shards = encode_shards(
        lambda a, b: texts[a:b],
        50,
        lambda b: (calls.append(len(b)), encoder.encode(b, "passage"))[1],
        tmp_path,
        shard_size=10,
    )
    assert calls == [10, 10, 10]  # only shards 2-4 were encoded again
    full = np.concatenate([np.load(p) for p in shards])
    assert np.allclose(full, encoder.encode(texts, "passage"), atol=1e-5)


@pytest.mark.parametrize(
    "factory,knob",
    [
        ("Flat", {}),
        ("HNSW32", {"ef_search": 64}),
        ("HNSW32,SQ8", {"ef_search": 128}),
        ("IVF8,Flat", {"nprobe": 8}),
        ("IVF4,PQ16x4", {"nprobe": 4}),  # 16 centroids a sub-quantizer: 256 took 14 s to train
    ],
)
def test_faiss_factory_strings_and_query_knobs(tmp_path, factory, knob):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    np.save(tmp_path / "emb_000000.npy", x[:300])
    np.save(tmp_path / "emb_000001.npy", x[300:])
    index = build_index([tmp_path / "emb_000000.npy", tmp_path / "emb_000001.npy"], factory)
    faiss.write_index(index, str(tmp_path / "i.faiss"))
    dense = DenseIndex(tmp_path / "i.faiss", **knob)
    assert dense.ntotal == 600
    if "ef_search" in knob:
        assert faiss.downcast_index(dense.index).hnsw.efSearch == knob["ef_search"]
    if "nprobe" in knob:
        assert faiss.extract_index_ivf(dense.index).nprobe == knob["nprobe"]
    _, ids = dense.search(x[[5, 450]], 5)
    # Each stored vector finds itself (ids are insertion order across shards).
    assert ids[0][0] == 5 and ids[1][0] == 450


def test_bad_factory_string_is_named(tmp_path):
    np.save(tmp_path / "emb_000000.npy", np.ones((10, 8), np.float32))
    with pytest.raises(ValueError, match="HNSWxx"):
        build_index([tmp_path / "emb_000000.npy"], "HNSWxx")
    with pytest.raises(ValueError, match="IVF4096"):
        build_index([tmp_path / "emb_000000.npy"], "IVF4096,Flat")


def test_prebuilt_faiss_index_is_used_in_place(tmp_path, encoder):
    rows = [{"id": str(i), "contents": f'"Doc {i}"\nThis passage talks about subject {i}.'} for i in range(20)]
    src = tmp_path / "wiki-18.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # A Search-R1 style index made outside the project: IndexFlatIP over the corpus in row order.
    index = faiss.IndexFlatIP(encoder.dim)
    index.add(encoder.encode([r["contents"] for r in rows], "passage"))
    faiss.write_index(index, str(tmp_path / "e5_Flat.index"))
    manifest, _ = build_kb(
        src, tmp_path / "kb", opts=BuildOptions(progress=False, bm25=False, import_faiss=tmp_path / "e5_Flat.index")
    )
    assert (
        manifest.dense_index == str((tmp_path / "e5_Flat.index").resolve()) and manifest.faiss_factory == "IndexFlatIP"
    )
    kb = KnowledgeBase(tmp_path / "kb", "dense")
    assert kb.search(["subject 13"], 1)[0][0][0] == 13
    kb.close()
    src.write_text("".join(json.dumps(r) + "\n" for r in rows[:19]))
    with pytest.raises(ValueError, match="holds 20 vectors but the corpus has 19"):
        build_kb(
            src,
            tmp_path / "kb2",
            opts=BuildOptions(progress=False, bm25=False, import_faiss=tmp_path / "e5_Flat.index"),
        )


def test_rrf_fusion():
    ids, scores = rrf_fuse([np.array([1, 2, 3]), np.array([3, 1, -1])], topk=3)
    assert ids == [1, 3, 2] and scores[0] > scores[1] > scores[2]


def test_retrievers_on_the_sample_kb(sample_kb):
    for name in ("dense", "bm25", "hybrid"):
        kb = KnowledgeBase(sample_kb, name)
        hits = kb.rows(kb.search(["Who developed the theory of relativity?"], 5)[0])
        assert len(hits) == 5 and "Albert Einstein" in [row["title"] for row, _ in hits], name
        kb.close()
    bm25 = KnowledgeBase(sample_kb, "bm25")
    # The same Snowball stemming at index and query time: inflected forms match.
    stemmed = bm25.rows(bm25.search(["relativities physicists"], 3)[0])
    assert "Albert Einstein" in [row["title"] for row, _ in stemmed]
    assert bm25.search(["the of and"], 3) == [[]]
    bm25.close()


def test_the_encoder_device_is_named_never_taken(encoder, monkeypatch):
    """`kb serve` encodes on the CPU unless told otherwise: a KB beside training must not take cuda:0 by itself.
    A device this torch cannot use is refused with the reason."""
    import torch

    from local_retriever.encoder import check_device

    assert encoder.device == "cpu"  # no GPU here; with one, Encoder() alone would take it (kb build's default)
    assert check_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"--device 'gpu0': use cpu, cuda or cuda:N"):
        check_device("gpu0")
    with pytest.raises(ValueError, match=r"--device cuda:0: this torch .* sees no CUDA device"):
        check_device("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match="this machine has 2 CUDA devices"):
        check_device("cuda:2")


def test_kb_serve_defaults_to_the_cpu_and_refuses_a_gpu_it_cannot_use(sample_kb):
    import subprocess
    import sys

    from local_retriever.cli import serve

    defaults = {p.name: p.default for p in __import__("inspect").signature(serve).parameters.values()}
    assert defaults["device"].default == "cpu" and defaults["faiss_gpu"].default is False
    for flags, reason in (
        (["--device", "cuda"], "--device cuda: this torch"),
        (["--faiss-gpu"], f"--faiss-gpu: this faiss ({faiss.__version__}) is built without GPU support"),
    ):
        ran = subprocess.run(
            [sys.executable, "-m", "asearcher_plugin.cli", "kb", "serve", str(sample_kb), "--port", "0", *flags],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert ran.returncode != 0 and reason in ran.stdout + ran.stderr, ran.stdout + ran.stderr
