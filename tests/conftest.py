import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Markers (see pytest.ini) are written where the tests are: `pytestmark = [...]` for a whole module, a decorator on a
# test where a module mixes kinds. `pytest -m "not slow"` is the quick loop; `-m "not ray"` / `-m "not browser"` leave
# out what needs Ray or Chromium.


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
    from tests.helpers import serve_app

    limits = ServerLimits(max_queries=64, max_body_bytes=64 * 1024, max_query_chars=500)
    app = BodyLimit(create_app(hybrid_kb, limits), limits.max_body_bytes)
    with serve_app(app) as url:
        yield url


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random Qwen2 model with its tokenizer trained on the sample corpus."""
    from asearcher_plugin.engines.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    """The tiny model's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


@pytest.fixture
def model_server(tiny_model):
    """A scripted OpenAI-compatible completions server (tests.helpers.ScriptedModel) answering the GAIA and FRAMES
    sample questions, and refusing one too long for its context; `.url`, `.tokenizer`, `.calls`."""
    from transformers import AutoTokenizer

    from tests.helpers import FRAMES, GAIA, TOO_LONG, ScriptedModel, serve_app

    answers = {r["question"]: r["golden_answers"][0] for r in GAIA + FRAMES}
    answers[f"Which river {TOO_LONG} crosses Luanda?"] = "Kwanza"
    model = ScriptedModel(AutoTokenizer.from_pretrained(tiny_model), answers)
    with serve_app(model.app) as url:
        model.url = url
        yield model


@pytest.fixture(scope="module")
def long_page(hybrid_kb, kb_server):
    """A KB page of more than one chunk, its URL, and its text as ASearcher's client reads it from /access."""
    import httpx

    page = hybrid_kb.pages.sample(1, seed=0, min_chars=30_000)[0]
    row = httpx.post(f"{kb_server}/access", json={"urls": [page["url"]]}).json()["result"][0]
    assert len(row["contents"]) > 25_000
    return page["url"], row["contents"]
