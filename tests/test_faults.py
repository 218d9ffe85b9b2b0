"""Whole-system faults: the KB server under mixed good and poison traffic, a replica killed mid-load, eval killed
mid-run. Each runs the real command (`asearcher kb serve`, `asearcher eval`) as a subprocess on loopback.

Kept elsewhere, not repeated here:
- batch isolation under poison: tests/test_server.py (`test_surrogate_query_is_refused_alone_under_load`,
  `test_batcher_fails_only_the_request_that_broke_the_batch`) and tests/test_client.py
  (`test_poison_requests_keep_both_real_replicas_up`);
- `kb build` killed with SIGKILL between the files of every stage, then resumed to the uninterrupted KB:
  tests/test_build_resume.py;
- slow-loris connections and Content-Length lies on their own: tests/test_server.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from fastapi import FastAPI, Request

from local_retriever.client import RetrievalClient
from local_retriever.sample import load_sample_questions
from local_retriever.server_process import serving
from tests.helpers import serve_app

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [q["question"] for q in load_sample_questions()]


def kb_serve(kb_dir: Path, log: Path, *flags: str):
    """`asearcher kb serve` (hybrid, one search thread) as a subprocess on a free port; yields (url, process)."""
    return serving(kb_dir, "hybrid", ["--threads", "1", *flags], log, timeout=900)


# --- soak: good and poison traffic mixed, memory levels off, no good request fails --------------------------------

MAX_BODY = 1024 * 1024
POISON = [
    ("/retrieve", b'{"queries": ["x\\ud800y"], "topk": 2}'),  # lone surrogates, sent as JSON escapes
    ("/retrieve", b'{"queries": ["ocean", "\\udfff"]}'),
    ("/access", b'{"urls": ["Angola", "\\ud800"]}'),
    ("/access", b'{"urls": ["http://[::1"]}'),  # malformed URLs
    ("/access", b'{"urls": ["http://a..b/", "http://example.org:99999/", "http://x:abc/", "http://"]}'),
    ("/retrieve", b'{"queries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),  # deep JSON
    ("/retrieve", b'{"queries": ["' + b"a" * (MAX_BODY + 10) + b'"]}'),  # over the body limit
    ("/retrieve", b'{"queries": ["' + b"ocean " * 100_000 + b'"]}'),  # under it: one very long query, truncated
    ("/retrieve", b"\xff\xfe not utf-8"),
    ("/retrieve", b'{"queries": ["a", }'),
    ("/retrieve", b'{"queries": [], "topk": 99999}'),
]
LIE = (
    b'POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"que'
)


async def _lie(url: str) -> bytes:
    """A body shorter than its Content-Length: the server must answer 408 and close."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(LIE)
        return await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()


async def _round(client: httpx.AsyncClient, url: str, i: int, failures: list) -> int:
    """One round of traffic: 24 good searches, 4 good page reads, every poison request, two lies, all at once."""

    async def good_search(j: int):
        q = QUESTIONS[(i * 24 + j) % len(QUESTIONS)]
        r = await client.post(f"{url}/retrieve", json={"queries": [q], "topk": 3, "return_scores": True})
        if r.status_code != 200 or len(r.json()["result"][0]) != 3:
            failures.append(("retrieve", q, r.status_code, r.text[:300]))

    async def good_page(title: str):
        r = await client.post(f"{url}/access", json={"urls": [title]})
        if r.status_code != 200 or (r.json()["result"][0] or {}).get("title") != title:
            failures.append(("access", title, r.status_code, r.text[:300]))

    async def poison(path: str, body: bytes):
        try:
            r = await client.post(f"{url}{path}", content=body, headers={"content-type": "application/json"})
        except httpx.TransportError as exc:
            # A body over the limit is refused (413) and the connection closed before the rest is read: the
            # client may see the reset first. Anything else must be answered.
            if len(body) <= MAX_BODY:
                failures.append(("poison", body[:60], repr(exc)))
            return
        ok = r.status_code < 500 and (r.status_code == 200 or set(r.json()) == {"error"})
        if not ok:
            failures.append(("poison", body[:60], r.status_code, r.text[:300]))

    async def lie():
        raw = await _lie(url)
        if not raw.startswith(b"HTTP/1.1 408 "):
            failures.append(("lie", raw[:200]))

    tasks = [good_search(j) for j in range(24)]
    tasks += [good_page(t) for t in ("Albert Einstein", "Angola", "Atlantic Ocean", "Algorithm")]
    tasks += [poison(p, b) for p, b in POISON] + [lie(), lie()]
    await asyncio.gather(*tasks)
    return len(tasks)


@pytest.mark.slow
def test_soak_mixed_traffic_memory_levels_off_and_no_good_request_fails(sample_kb, tmp_path, monkeypatch):
    warmup_rounds, rounds = 10, 24
    # glibc's mmap threshold is dynamic: once a large block (a round's 1 MB body) is freed, the threshold rises to its
    # size, and later bodies of that size go to the arenas, which keep what they held. RSS moved +-50 MB a round and
    # read as a 25-72 MB climb (on an idle 2-core EPYC, and in CI with two arenas: 52 MB on 2026-11-30). A fixed
    # threshold keeps large bodies mapped, and unmapped on free: RSS then moved under 2 MB a round and the floor
    # rose 1 MB between the thirds, in 3 runs of 3 (a planted leak of 4 MB a round lifts it 32 MB).
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(128 * 1024))
    with kb_serve(
        sample_kb,
        tmp_path / "serve.log",
        "--max-body-bytes",
        str(MAX_BODY),
        "--body-timeout",
        "1",  # each round waits for its two lies to be cut: the soak took 108 s in CI at 3 s, 74 s at 2 s, 53 s at 1 s
        "--header-timeout",
        "2",
    ) as (url, proc):
        server = psutil.Process(proc.pid)

        async def run():
            failures: list = []
            rss: list[int] = []
            sent = 0
            # An idle connection is closed by the server after --header-timeout (2 s here), as it waits for the next
            # request's headers: the client drops its idle connections well before, or a reuse races the close.
            limits = httpx.Limits(max_connections=64, keepalive_expiry=1.0)
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                for i in range(warmup_rounds + rounds):
                    sent += await _round(client, url, i, failures)
                    rss.append(server.memory_info().rss)
            return failures, rss, sent

        failures, rss, sent = asyncio.run(run())
        health = httpx.get(f"{url}/health").json()
    assert not failures, failures[:5]
    assert sent == (warmup_rounds + rounds) * (28 + len(POISON) + 2)
    assert health["errors_5xx"] == 0
    warm, after = max(rss[:warmup_rounds]), rss[warmup_rounds:]
    mb = [round(r / 2**20) for r in rss]
    assert max(after) - warm < 160 * 2**20, f"RSS rose {(max(after) - warm) / 2**20:.0f} MB after warm-up: {mb}"
    assert floor_climb(after) < 24 * 2**20, f"RSS still climbing at the end: {mb}"


def floor_climb(after: list[int]) -> int:
    """How far the floor of the last third of the rounds lies above the floor of the middle third, a floor being a
    third's second-lowest RSS.

    The allocator keeps arenas for the largest batches seen, so RSS steps up for a while before it levels off
    (~800 MB in a 4-minute, 10,000-request run), and a large batch can hold ~60 MB for several rounds before it is
    given back (a CI run: 768 MB for 7 rounds, 820 MB for 6, back to 766). Such plateaus lift a third's median but
    not its floor; a leak lifts every round, the floor too (4 MB a round lifts it 32 MB between the thirds). The
    second-lowest, not the lowest: the allocator can also give back ~40 MB for a single round (another CI run: 710 MB
    once among 750-810), which lowered the middle third's minimum alone and read as a 42 MB climb.
    """
    third = len(after) // 3
    return sorted(after[-third:])[1] - sorted(after[third:-third])[1]


# RSS (MB) of the 24 rounds after warm-up in two CI runs whose memory levelled off (plateaus in the first, a single
# dip in the second), and the same with a planted leak.
_LEVELLED_MB = [777, 777, 768, 757, 817, 758, 783, 805, 805, 767, 768, 768, 769, 769, 772, 819]
_LEVELLED_MB += [819, 820, 820, 820, 766, 782, 798, 798]
_ONE_DIP_MB = [719, 812, 762, 788, 766, 748, 779, 763, 754, 786, 806, 765, 795, 774, 710, 786]
_ONE_DIP_MB += [752, 804, 764, 793, 772, 762, 782, 771]


@pytest.mark.parametrize("levelled", [_LEVELLED_MB, _ONE_DIP_MB], ids=["plateaus", "one dip"])
def test_floor_climb_passes_allocator_plateaus_and_catches_a_leak(levelled):
    assert floor_climb([m * 2**20 for m in levelled]) < 24 * 2**20
    leaking = [(m + 4 * i) * 2**20 for i, m in enumerate(levelled)]
    assert floor_climb(leaking) >= 24 * 2**20


# --- replica kill: one of two servers dies mid-load; the client loses nothing -----------------------------------


@pytest.mark.slow
def test_kill_9_of_one_replica_mid_load_loses_nothing(sample_kb, tmp_path):
    total, kill_at = 600, 150
    with kb_serve(sample_kb, tmp_path / "a.log") as (url_a, _), kb_serve(sample_kb, tmp_path / "b.log") as (url_b, b):

        async def run():
            done, killed_after = 0, None
            async with RetrievalClient([url_a, url_b], timeout=60, retries=4, cooldown=2.0) as client:
                gate = asyncio.Semaphore(16)

                async def one(i: int):
                    nonlocal done, killed_after
                    async with gate:
                        q = QUESTIONS[i % len(QUESTIONS)]
                        hits = await client.retrieve([q], topk=3)
                    done += 1
                    if done == kill_at:
                        os.kill(b.pid, signal.SIGKILL)
                        killed_after = done
                    return hits

                results = await asyncio.gather(*(one(i) for i in range(total)), return_exceptions=True)
                return results, killed_after, client.stats()

        results, killed_after, stats = asyncio.run(run())
        assert b.wait(timeout=30) == -signal.SIGKILL
    lost = [r for r in results if isinstance(r, BaseException)]
    assert not lost, f"{len(lost)} of {total} lost: {lost[:3]}"
    assert all(len(r) == 1 and len(r[0]) == 3 and r[0][0]["document"]["contents"] for r in results)
    assert killed_after == kill_at  # the kill came with 450 requests still to go
    assert stats["errors"].get(url_b, 0) >= 1, stats  # requests really met the dead replica and moved on


# --- eval killed with SIGKILL mid-run, twice, then resumed: every item once, the same metrics -------------------


class AgentModel:
    """OpenAI `/v1/completions`: searches for the question once, then answers it (right for every other question).

    Replies depend on the question alone, so an interrupted run and an uninterrupted one score alike.
    """

    MARK = "zqxsearch"

    def __init__(self, tokenizer, answers: dict[str, str], delay: float):
        self.tokenizer, self.answers, self.delay = tokenizer, answers, delay
        self.calls = 0
        self.lock = threading.Lock()
        self.app = FastAPI()
        self.app.post("/v1/completions")(self.completions)

    async def completions(self, request: Request):
        body = await request.json()
        prompt = self.tokenizer.decode(body["prompt"])
        with self.lock:
            self.calls += 1
        await asyncio.sleep(self.delay)
        question = next(q for q in self.answers if q in prompt)
        if self.MARK in prompt:
            text = f"<think>read it</think> <answer>{self.answers[question]}</answer>"
        else:
            text = f"<think>look it up</think> <search>{self.MARK} {question}</search>"
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": body["model"],
            "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
        }


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if "second" not in k and "time" not in k}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


@pytest.mark.slow
def test_eval_killed_twice_mid_run_resumes_to_the_uninterrupted_result(tmp_path, tiny_model, kb_server):
    from transformers import AutoTokenizer

    rows = load_sample_questions()[:24]
    data = {}
    for name, part in (("nq", rows[:12]), ("tqa", rows[12:])):  # FlashRAG-style ids, equal in both files
        data[name] = tmp_path / f"{name}.jsonl"
        data[name].write_text(
            "".join(
                json.dumps({"id": f"test_{i}", "question": r["question"], "golden_answers": r["golden_answers"]})
                + "\n"
                for i, r in enumerate(part)
            )
        )
    answers = {r["question"]: r["golden_answers"][0] if i % 2 == 0 else "Paris" for i, r in enumerate(rows)}
    model = AgentModel(AutoTokenizer.from_pretrained(tiny_model), answers, delay=0.1)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("agent:\n  agent_type: search-r1\n  max_turns: 3\n")
    k = 2
    expected = sorted((d, f"test_{i}", s) for d in ("nq", "tqa") for i in range(12) for s in range(k))

    with serve_app(model.app) as model_url:

        def command(out: Path) -> list[str]:
            return [
                sys.executable,
                "-m",
                "asearcher_plugin.cli",
                "eval",
                "--dataset",
                str(data["nq"]),
                "--dataset",
                str(data["tqa"]),
                "--k",
                str(k),
                "--out",
                str(out),
                "--agent-config",
                str(cfg),
                "--kb-url",
                kb_server,
                "--base-url",
                f"{model_url}/v1",
                "--model",
                "scripted",
                "--tokenizer",
                str(tiny_model),
                "--max-length",
                "2048",
                "--concurrency",
                "2",
            ]

        whole = tmp_path / "whole"
        done = subprocess.run(command(whole), cwd=ROOT, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-2000:]

        cut = tmp_path / "cut"
        lines_at_kill = []
        for stop_after in (10, 30):
            proc = subprocess.Popen(command(cut), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            path = cut / "trajectories.jsonl"
            while proc.poll() is None:
                if path.is_file() and path.read_bytes().count(b"\n") >= stop_after:
                    proc.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.02)
            assert proc.wait(timeout=60) == -signal.SIGKILL, "the run ended before it could be killed"
            lines_at_kill.append(path.read_bytes().count(b"\n"))
            assert not (cut / "metrics.json").exists()
        resumed = subprocess.run(command(cut), cwd=ROOT, capture_output=True, text=True, timeout=1200)
        assert resumed.returncode == 0, resumed.stderr[-2000:]

    assert lines_at_kill[0] < lines_at_kill[1] < len(expected)
    for out in (whole, cut):
        got = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
        assert sorted((r["dataset"], r["id"], r["seed"]) for r in got) == expected  # each item exactly once
        assert all(r["status"] == "ok" for r in got)
    metrics = [_without_timings(json.loads((out / "metrics.json").read_text())) for out in (whole, cut)]
    assert metrics[0] == metrics[1]
    assert metrics[0]["datasets"]["nq"]["em"]["questions"] == 12
    assert 0 < metrics[0]["datasets"]["overall"]["em"][f"avg@{k}"] < 1
