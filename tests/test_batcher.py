"""The micro-batcher on the real sample KB, serial and overlapped: no waiting when idle, answers as if alone."""

import asyncio
import queue
import threading
import time

import httpx
import pytest

from local_retriever.batcher import MicroBatcher
from local_retriever.kb import KnowledgeBase
from local_retriever.sample import load_sample_questions
from local_retriever.server import ServerLimits, build_app, uvicorn_options
from tests.helpers import serve_app

QUESTIONS = [q["question"] for q in load_sample_questions()]
PLANTED = "a query the search stage fails on"


class Recorded:
    """The real KB's stages, recording each call; either stage can be held until the test lets it go."""

    def __init__(self, kb: KnowledgeBase):
        self.kb = kb
        self.prepared: queue.Queue[list[str]] = queue.Queue()
        self.searched: queue.Queue[int] = queue.Queue()
        self.prepare_open, self.search_open = threading.Event(), threading.Event()
        self.prepare_open.set()
        self.search_open.set()

    def prepare(self, queries):
        self.prepared.put(list(queries))
        assert self.prepare_open.wait(60)
        return self.kb.prepare(queries), list(queries)

    def join(self, parts):
        return self.kb.join([p for p, _ in parts]), [q for _, qs in parts for q in qs]

    def search_prepared(self, prepared, topk):
        prepared, queries = prepared
        self.searched.put(prepared.n)
        assert self.search_open.wait(60)
        if PLANTED in queries:
            raise RuntimeError("planted search failure")
        return self.kb.search_prepared(prepared, topk)


@pytest.fixture(params=["serial", "overlap"])
def recorded(request, hybrid_kb):
    stages = Recorded(hybrid_kb)
    batcher = MicroBatcher(stages, max_batch=128, overlap=request.param == "overlap")
    yield stages, batcher
    stages.prepare_open.set()
    stages.search_open.set()
    batcher.close()


def test_an_idle_batcher_starts_at_once_and_batches_what_queued_meanwhile(recorded):
    stages, batcher = recorded
    stages.prepare_open.clear()
    first = batcher.submit(["capital of Angola"], 3)
    # Started alone, without waiting for company: the next request is submitted only after this.
    assert stages.prepared.get(timeout=60) == ["capital of Angola"]
    later = [batcher.submit([q], 3) for q in ("theory of relativity", "Atlantic Ocean", "Algorithm")]
    stages.prepare_open.set()
    assert stages.prepared.get(timeout=60) == ["theory of relativity", "Atlantic Ocean", "Algorithm"]
    assert first.result(timeout=60) == [batcher_free_search(stages.kb, "capital of Angola", 3)]
    for fut, q in zip(later, ("theory of relativity", "Atlantic Ocean", "Algorithm")):
        assert fut.result(timeout=60) == [batcher_free_search(stages.kb, q, 3)]


@pytest.mark.parametrize("recorded", ["serial"], indirect=True)
def test_serial_stages_prepare_what_queued_during_a_search_as_one_batch(recorded):
    stages, batcher = recorded
    stages.search_open.clear()
    a = batcher.submit(["capital of Angola"], 3)
    assert stages.searched.get(timeout=60) == 1  # A is being searched, and held there
    b = batcher.submit(["theory of relativity"], 3)
    c = batcher.submit(["Atlantic Ocean", "Algorithm"], 5)
    assert stages.prepared.get(timeout=60) == ["capital of Angola"]
    time.sleep(0.5)
    assert stages.prepared.empty()  # nothing is encoded while a search holds the cores
    stages.search_open.set()
    assert stages.prepared.get(timeout=60) == ["theory of relativity", "Atlantic Ocean", "Algorithm"]
    assert stages.searched.get(timeout=60) == 3
    assert_answered_as_alone(stages.kb, a, b, c)
    assert batcher.batches == 2 and batcher.prepare_batches == 2


@pytest.mark.parametrize("recorded", ["serial"], indirect=True)
def test_requests_that_arrive_while_a_batch_is_encoded_join_its_search(recorded):
    stages, batcher = recorded
    stages.prepare_open.clear()
    a = batcher.submit(["capital of Angola"], 3)
    assert stages.prepared.get(timeout=60) == ["capital of Angola"]  # A is being encoded, and held there
    b = batcher.submit(["theory of relativity"], 3)
    c = batcher.submit(["Atlantic Ocean", "Algorithm"], 5)
    stages.prepare_open.set()
    assert stages.prepared.get(timeout=60) == ["theory of relativity", "Atlantic Ocean", "Algorithm"]
    assert stages.searched.get(timeout=60) == 4  # one scan for A, B and C
    assert_answered_as_alone(stages.kb, a, b, c)
    assert batcher.batches == 1 and batcher.prepare_batches == 2


@pytest.mark.parametrize("recorded", ["overlap"], indirect=True)
def test_the_next_batch_is_encoded_while_this_one_is_searched(recorded):
    stages, batcher = recorded
    stages.search_open.clear()
    a = batcher.submit(["capital of Angola"], 3)
    assert stages.searched.get(timeout=60) == 1  # A is being searched, and held there
    b = batcher.submit(["theory of relativity"], 3)
    assert stages.prepared.get(timeout=60) == ["capital of Angola"]
    assert stages.prepared.get(timeout=60) == ["theory of relativity"]  # encoded while A's search runs
    c = batcher.submit(["Atlantic Ocean", "Algorithm"], 5)
    assert stages.prepared.get(timeout=60) == ["Atlantic Ocean", "Algorithm"]
    wait_for(lambda: batcher.prepare_batches == 3)  # C handed over to the search stage too
    stages.search_open.set()
    # Everything prepared during A's search is searched together: B and C in one batch of three queries.
    assert stages.searched.get(timeout=60) == 3
    assert_answered_as_alone(stages.kb, a, b, c)
    assert batcher.batches == 2 and batcher.prepare_batches == 3


@pytest.mark.parametrize(
    "culprit,error",
    [
        (["fine", None], Exception),  # the encoder's tokenizer refuses a non-string: stage one fails
        ([PLANTED], RuntimeError),  # the planted failure of stage two
    ],
)
def test_a_failed_batch_fails_only_its_culprit(recorded, culprit, error):
    stages, batcher = recorded
    stages.prepare_open.clear()
    head = batcher.submit(["capital of Angola"], 3)
    stages.prepared.get(timeout=60)
    # Everything below queues while the head is prepared, so it is prepared, then searched, as one batch.
    queries = [f"capital of Angola {i}" for i in range(12)]
    futures = [batcher.submit([q], 3) for q in queries[:6]]
    bad = batcher.submit(culprit, 3)
    futures += [batcher.submit([q], 3) for q in queries[6:]]
    stages.prepare_open.set()
    with pytest.raises(error):
        bad.result(timeout=60)
    assert head.result(timeout=60) == [batcher_free_search(stages.kb, "capital of Angola", 3)]
    for q, fut in zip(queries, futures):
        assert fut.result(timeout=60) == [batcher_free_search(stages.kb, q, 3)]
    assert batcher.failed_batches == 1  # the culprit really shared a batch with the others


def wait_for(condition, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def batcher_free_search(kb: KnowledgeBase, query: str, topk: int):
    return kb.search([query], topk)[0]


def assert_answered_as_alone(kb: KnowledgeBase, a, b, c) -> None:
    """The futures of A, B and C (the requests of the stage tests) hold what each query gets searched alone."""
    assert a.result(timeout=60) == [batcher_free_search(kb, "capital of Angola", 3)]
    assert b.result(timeout=60) == [batcher_free_search(kb, "theory of relativity", 3)]
    assert c.result(timeout=60) == [
        batcher_free_search(kb, "Atlantic Ocean", 5),
        batcher_free_search(kb, "Algorithm", 5),
    ]


# --- Through the HTTP server, every retriever: the same ids and scores as searching each query alone -------------


@pytest.fixture(scope="module", params=["dense", "bm25", "hybrid", "dense-overlap"])
def served(request, sample_kb):
    retriever, _, mode = request.param.partition("-")
    kb = KnowledgeBase(sample_kb, retriever)
    limits = ServerLimits(overlap_stages=mode == "overlap")
    with serve_app(build_app(kb, limits), **uvicorn_options(limits)) as url:
        yield kb, url
    kb.close()


def test_concurrent_answers_are_those_of_each_query_alone(served):
    kb, url = served
    questions = QUESTIONS * 2

    async def fire():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as client:
            return await asyncio.gather(
                *(
                    client.post(f"{url}/retrieve", json={"queries": [q], "topk": 5, "return_scores": True})
                    for q in questions
                )
            )

    responses = asyncio.run(fire())
    health = httpx.get(f"{url}/health").json()
    assert health["mean_batch"] > 1  # requests really shared searches
    for q, r in zip(questions, responses):
        assert r.status_code == 200, r.text
        got = [(hit["document"]["id"], hit["score"]) for hit in r.json()["result"][0]]
        alone = [(doc["id"], score) for doc, score in kb.rows(kb.search([q], 5)[0])]
        assert [d for d, _ in got] == [d for d, _ in alone], q
        if kb.retriever == "dense":
            # Same ids; a cosine may differ in its last float32 bits: matrix products round by the shape of
            # the batch and the thread count (one query encoded alone on 1 or 2 threads differs the same way).
            assert [s for _, s in got] == pytest.approx([s for _, s in alone], abs=1e-5), q
        else:
            assert got == alone, q  # BM25 scores each query alone; fusion goes by rank


def test_many_queries_in_one_request_match_each_alone(served):
    kb, url = served
    r = httpx.post(f"{url}/retrieve", json={"queries": QUESTIONS[:20], "topk": 3, "return_scores": True}, timeout=60)
    assert r.status_code == 200
    for q, hits in zip(QUESTIONS[:20], r.json()["result"]):
        alone = kb.rows(kb.search([q], 3)[0])
        assert [h["document"]["id"] for h in hits] == [doc["id"] for doc, _ in alone]
