import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Markers (see pytest.ini) are written where the tests are: `pytestmark = [...]` for a whole module, a decorator on a
# test where a module mixes kinds. `pytest -m "not slow"` is the quick loop; `-m "not ray"` / `-m "not browser"` leave
# out what needs Ray or Chromium.


# Where `asearcher quickstart` builds the sample KB when run from the checkout, as CI runs it before the suite.
QUICKSTART_KB = Path(__file__).resolve().parent.parent / "runs" / "sample-kb"


def quickstart_kb_matches(kb: Path) -> bool:
    """Whether `kb` holds what `sample_kb` would build: the installed sample dump, the default encoder and index, this
    format, and built after the dump and every module of `local_retriever` last changed (a KB left by an older
    checkout is built again)."""
    from local_retriever.encoder import EncoderConfig
    from local_retriever.manifest import FORMAT_VERSION, Manifest
    from local_retriever.sample import sample_dump_path

    try:
        manifest = Manifest.load(kb)
    except (OSError, ValueError):
        return False
    code = Path(__file__).resolve().parent.parent / "local_retriever"
    newest_input = max(p.stat().st_mtime for p in [sample_dump_path(), *code.rglob("*.py")])
    return (
        manifest.format_version == FORMAT_VERSION
        and manifest.source == str(sample_dump_path().resolve())
        and manifest.encoder == EncoderConfig()
        and manifest.faiss_factory == "Flat"
        and bool(manifest.dense_index and manifest.bm25_index)
        and (kb / "manifest.json").stat().st_mtime > newest_input
    )


@pytest.fixture(scope="session")
def sample_kb(tmp_path_factory) -> Path:
    """The bundled sample knowledge base (real Wikipedia articles, real encoder, Flat + BM25), built once; a copy of
    the quickstart's build in the checkout when it holds the same (`quickstart_kb_matches`), which saves encoding the
    4,366 passages again (2-3 minutes on 2 cores). The build itself has its own tests."""
    import shutil

    from local_retriever.build import BuildOptions, build_kb
    from local_retriever.sample import sample_dump_path

    out = tmp_path_factory.mktemp("kb") / "sample"
    if quickstart_kb_matches(QUICKSTART_KB):
        shutil.copytree(QUICKSTART_KB, out)
    else:
        build_kb(sample_dump_path(), out, opts=BuildOptions(progress=False))
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
