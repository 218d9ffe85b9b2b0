"""The bundled questions are well-formed and grounded in the sample articles."""

import pytest

from local_retriever.sample import load_sample_questions, sample_dump_path
from local_retriever.wikitext import clean_wikitext
from local_retriever.wikixml import iter_pages


@pytest.fixture(scope="module")
def articles():
    return {p.title: clean_wikitext(p.text) for p in iter_pages(sample_dump_path()) if p.ns == 0 and not p.redirect}


def test_format():
    qs = load_sample_questions()
    assert len(qs) >= 60 and len({q["id"] for q in qs}) == len(qs)
    for q in qs:
        assert isinstance(q["question"], str) and q["question"].strip()
        assert q["golden_answers"] and all(isinstance(a, str) and a for a in q["golden_answers"])
        assert q["hops"] == len(q["supporting_titles"]) in (1, 2)
    assert sum(q["hops"] == 2 for q in qs) >= 15
    assert len({t for q in qs for t in q["supporting_titles"]}) >= 40


def test_grounded_in_the_articles(articles):
    for q in load_sample_questions():
        assert all(t in articles for t in q["supporting_titles"]), q["id"]
        answer = q["golden_answers"][0].lower()
        # The answer is stated in the last supporting article: the hop the question ends on.
        assert answer in articles[q["supporting_titles"][-1]].lower(), q["id"]
