import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def sample_kb(tmp_path_factory) -> Path:
    """The bundled sample knowledge base (real Wikipedia articles, real encoder, Flat + BM25), built once."""
    from local_retriever.build import BuildOptions, build_kb
    from local_retriever.sample import sample_dump_path

    out = tmp_path_factory.mktemp("kb") / "sample"
    build_kb(sample_dump_path(), out, opts=BuildOptions(progress=False, shard_size=2000))
    return out


@pytest.fixture(scope="session")
def hybrid_kb(sample_kb):
    from local_retriever.kb import KnowledgeBase

    kb = KnowledgeBase(sample_kb, "hybrid")
    yield kb
    kb.close()


@pytest.fixture(scope="session")
def kb_server(hybrid_kb):
    """A real uvicorn server on loopback over the sample KB; yields its base URL."""
    from local_retriever.server import BodyLimit, ServerLimits, create_app
    from tests.http_helpers import serve_app

    limits = ServerLimits(max_queries=64, max_body_bytes=64 * 1024, max_query_chars=500)
    app = BodyLimit(create_app(hybrid_kb, limits), limits.max_body_bytes)
    with serve_app(app) as url:
        yield url


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random Qwen2 model with its tokenizer trained on the sample corpus."""
    from asearcher_plugin.engines.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny")
