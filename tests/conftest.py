import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Markers (see pytest.ini) are written where the tests are: `pytestmark = [...]` for a whole module, a decorator on a
# test where a module mixes kinds. `pytest -m "not slow"` is the quick loop; `-m "not ray"` / `-m "not browser"` leave
# out what needs Ray or Chromium.


# The quick pass hands a file to each of its two workers at a time, in collection order (scripts/test.sh:
# `--dist loadfile --no-loadscope-reorder`; xdist's own order is by test count). The costliest files go first, so the
# last file a worker takes is a short one and the two end together. Their times in the quick pass on the AVX2 EPYC
# (docs/testing.md): test_cli 105 s, test_eval_card 85, test_scheduler_openrlhf 85, test_eval_run 83, test_preflight
# 70, test_server 45, test_eval_items 44, test_batcher 43, test_asearcher_layout 40; every other file under 40 s.
COSTLIEST_FIRST = (
    "test_cli.py",
    "test_eval_card.py",
    "test_scheduler_openrlhf.py",
    "test_eval_run.py",
    "test_preflight.py",
    "test_server.py",
    "test_eval_items.py",
    "test_batcher.py",
    "test_asearcher_layout.py",
)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {name: i for i, name in enumerate(COSTLIEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests stay together


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
