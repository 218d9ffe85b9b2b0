import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Markers by module, or by test where a module mixes kinds (see pytest.ini): `pytest -m "not slow"` is the quick loop,
# `-m "not ray"` / `-m "not browser"` leave out what needs Ray or Chromium.
MODULE_MARKS = {
    "test_openrlhf_train_cpu": ("slow", "ray"),  # OpenRLHF's own train() on CPU stand-ins
    "test_rollout_ray": ("slow", "ray"),
    "test_scheduler_openrlhf": ("ray",),
    "test_build_resume": ("slow",),  # kill -9 builds in subprocesses, then resumes
    "test_eval_report_browser": ("browser",),
}
TEST_MARKS = {
    "test_runs_in_shards_on_ray": ("slow", "ray"),
    "test_quickstart_runs_the_whole_path": ("slow", "ray"),
    "test_kb_quickstart_serves_and_asks_the_sample_questions": ("slow",),
    "test_streaming_generator_hands_out_batches_of_complete_groups": ("slow",),
    "test_every_episode_is_a_full_pass_over_the_prompts": ("slow",),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        marks = MODULE_MARKS.get(module, ()) + TEST_MARKS.get(item.originalname or item.name, ())
        for mark in dict.fromkeys(marks):
            item.add_marker(getattr(pytest.mark, mark))


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


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    """The tiny model's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))
