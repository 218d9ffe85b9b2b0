"""The bundled sample: real Wikipedia articles from the XML sample in the `gensim` wheel, and questions on them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SAMPLE_DUMP = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
SAMPLE_QUESTIONS_PATH = Path(__file__).resolve().parent / "data" / "sample_questions.jsonl"


def sample_dump_path() -> Path:
    # Located without importing gensim, which pulls in scipy and compiled extensions.
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the sample knowledge base needs the `gensim` package (pip install gensim)")
    path = Path(list(spec.submodule_search_locations)[0]) / SAMPLE_DUMP
    if not path.is_file():
        raise FileNotFoundError(f"the Wikipedia sample is missing from the installed gensim: {path}")
    return path


def load_sample_questions() -> list[dict]:
    with open(SAMPLE_QUESTIONS_PATH, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
