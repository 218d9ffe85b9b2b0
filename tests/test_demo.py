"""`asearcher demo` over real HTTP and WebSocket: the sample KB server, the tiny model, the scripted reference policy.

Bad input is refused with a message naming it and the same page goes on working; a stopped run, or a page
closed mid-run, ends the engine's generation at the next token; a finished run saves as the line `asearcher eval`
writes for the same question, and that line (or an eval file) replays into the turns the run streamed.
"""

import asyncio
import json
import threading

import pytest
from websockets.sync.client import connect

from asearcher_plugin.demo.guard import Access, is_loopback
from asearcher_plugin.demo.redact import MASK
from asearcher_plugin.demo.server import NETWORK_WARNING, create_app
from asearcher_plugin.engines.hf import HFEngine
from asearcher_plugin.settings.config import AgentConfig
from tests.helpers import free_port, serve_app

QUESTION, GOLD = "What is the capital and largest city of Angola?", "Luanda"
TERMINAL = {"finished", "stopped", "error"}


TOKEN = "launch-token-of-the-demo-tests"
AUTH = {"Authorization": f"token {TOKEN}"}  # what a script and the page send
SECRET = "sk-demo-secret-4f9a1c"


@pytest.fixture(scope="module")
def demo(kb_server, tiny_model):
    dead = f"http://127.0.0.1:{free_port()}"  # a KB and a model server given at launch that do not answer
    models = (dead + "/v1", f"{dead}/v1?key={SECRET}")
    app = create_app(
        [kb_server, dead], tiny_model, access=Access.for_bind("127.0.0.1", token=TOKEN), model_urls=models
    )
    app.state.dead = dead
    with serve_app(app) as url:
        yield url, app


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + f"/ws?token={TOKEN}"


def recv(ws, timeout=120) -> dict:
    return json.loads(ws.recv(timeout=timeout))


def start(ws, request: dict, ref=1) -> dict:
    ws.send(json.dumps({"op": "start", "ref": ref, "request": request}))
    return recv(ws)


def run_to_end(ws, request: dict) -> tuple[str, list[dict]]:
    reply = start(ws, request)
    assert reply["type"] == "accepted", reply
    events = []
    while not events or events[-1]["type"] not in TERMINAL:
        events.append(recv(ws))
    return reply["run"], events


def reference_request(**overrides) -> dict:
    return {"question": QUESTION, "gold": GOLD, "model": {"kind": "reference"}, **overrides}


def test_bad_requests_are_refused_by_name_and_the_page_goes_on(demo):
    url, _ = demo
    with connect(ws_url(url)) as ws:
        assert "empty" in start(ws, {"question": "  \n "})["error"]
        long = start(ws, {"question": "x" * 100_000})
        assert long["type"] == "rejected" and "100,000 characters" in long["error"]
        # a browser's JSON.stringify escapes a lone surrogate like this; the frame itself is valid UTF-8
        ws.send('{"op": "start", "ref": 7, "request": {"question": "capital of \\ud800 Angola"}}')
        lone = recv(ws)
        assert lone["ref"] == 7 and "lone surrogate (U+D800) at character 12" in lone["error"]
        ws.send('{"op": "start", "ref": 8, "request": {"question": "q", "gold": "\\udfff"}}')
        assert "gold answer holds a lone surrogate" in recv(ws)["error"]
        ws.send("not json {")
        assert recv(ws)["error"] == "a message must be JSON"
        ws.send(json.dumps({"op": "launch"}))
        assert "op must be start or stop" in recv(ws)["error"]
        bad_url = start(ws, {"question": "q", "model": {"kind": "openai", "url": "ftp://x"}})
        assert "model url" in bad_url["error"] and "not an http(s) URL" in bad_url["error"]
        assert "max_turns" in start(ws, {"question": "q", "max_turns": 0})["error"]
        ws.send(json.dumps({"op": "stop", "run": "r999"}))
        assert "r999 is not running" in recv(ws)["error"]
        # nothing broke: the same page runs a question
        _, events = run_to_end(ws, reference_request())
        assert events[-1]["type"] == "finished"


def test_unreachable_kb_and_model_server_are_reported_before_any_turn(demo):
    url, app = demo
    dead = app.state.dead
    with connect(ws_url(url)) as ws:
        _, events = run_to_end(ws, reference_request(tools={"kb_url": dead}))
        assert [e["type"] for e in events][-1] == "error"
        assert f"knowledge base at {dead} is not reachable" in events[-1]["text"]
        _, events = run_to_end(ws, {"question": QUESTION, "model": {"kind": "openai", "url": dead + "/v1"}})
        assert events[-1]["type"] == "error" and f"model server {dead}/v1 is not reachable" in events[-1]["text"]
        assert not any(e["type"] == "turn" for e in events)


def test_a_run_streams_its_turns_saves_the_eval_line_and_replays(demo, tmp_path):
    pytest.importorskip("asearcher_plugin.agent.reference_policy")
    url, app = demo
    with connect(ws_url(url)) as ws:
        run_id, events = run_to_end(ws, reference_request())
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "finished" and kinds.index("started") < kinds.index("turn")
    turns = [e for e in events if e["type"] == "turn"]
    assert [(t["turn"], t["action"]) for t in turns] == [(1, "search"), (2, "access"), (3, "answer")]
    assert turns[0]["argument"] == QUESTION and "Doc 1(Title: Angola)" in turns[0]["feedback"]
    assert turns[1]["argument"] == "https://en.wikipedia.org/wiki/Angola" and ">>>> Page 1 of" in turns[1]["feedback"]
    end = events[-1]
    assert end["answer"] == GOLD and end["scores"]["em"] == 1.0 and end["stats"]["searches"] == 1.0

    import httpx

    line = httpx.get(f"{url}/api/runs/{run_id}/line", headers=AUTH).text
    saved = json.loads(line)
    # the line `asearcher eval` writes for the same question, model and agent settings
    from asearcher_plugin.agent.reference_policy import ReferencePolicy
    from asearcher_plugin.eval.runner import run_eval

    manager = app.state.manager
    tok = next(iter(manager.models.hf_engines.values())).tokenizer
    config: AgentConfig = manager.agent_config(manager.runs[run_id].request)
    policy = ReferencePolicy(tok, config.agent_type, {QUESTION: [GOLD]})
    items = [{"dataset": "demo", "id": run_id, "question": QUESTION, "golden_answers": [GOLD]}]
    asyncio.run(run_eval(items, config, policy, tok, tmp_path, max_length=4096, progress=False))
    written = json.loads((tmp_path / "trajectories.jsonl").read_text().splitlines()[0])
    assert set(saved) == set(written)
    for row in (saved, written):  # wall-clock figures aside
        del row["seconds"], row["logs"]["tool_seconds"]
    assert saved == written

    replayed = httpx.post(f"{url}/api/replay", content=line, headers=AUTH).json()
    (row,) = replayed["rows"]
    assert [(t["action"], t["argument"], t["feedback"]) for t in row["turns"]] == [
        (t["action"], t["argument"], t["feedback"]) for t in turns
    ]
    assert QUESTION in row["prompt"] and row["scores"]["f1"] == 1.0
    # an eval file with a cut last line and a stray line: the good rows replay, the others are named by line number
    mixed = line + "\nnot json\n" + json.dumps({"id": 1}) + "\n" + line[: len(line) // 2]
    replayed = httpx.post(f"{url}/api/replay", content=mixed, headers=AUTH).json()
    assert len(replayed["rows"]) == 1 and [p.split(":")[0] for p in replayed["problems"]] == [
        "line 3",
        "line 4",
        "line 5",
    ]
    empty = httpx.post(f"{url}/api/replay", content="garbage\n", headers=AUTH)
    assert empty.status_code == 400 and "no trajectory line in this file (line 1:" in empty.json()["error"]
    running = httpx.get(f"{url}/api/runs/nope/line", headers=AUTH)
    assert running.status_code == 404 and "no run 'nope'" in running.json()["error"]


def test_a_tool_calls_run_streams_each_call_with_its_arguments_and_result(demo):
    pytest.importorskip("asearcher_plugin.agent.reference_policy")
    url, _ = demo
    with connect(ws_url(url)) as ws:
        _, events = run_to_end(ws, reference_request(agent_type="tool-calls"))
    turns = [e for e in events if e["type"] == "turn"]
    assert [t["action"] for t in turns] == ["tool_calls", "tool_calls", "answer"]
    (search,), (access,) = turns[0]["calls"], turns[1]["calls"]
    assert search["name"] == "search" and search["arguments"] == {"query": QUESTION}
    assert "Doc 1(Title: Angola)" in search["result"]
    assert access == {**access, "name": "access", "arguments": {"url": "https://en.wikipedia.org/wiki/Angola"}}
    assert access["result"].startswith(">>>> Page 1 of")
    assert events[-1]["answer"] == GOLD and events[-1]["stats"]["tool_calls"] == 2.0


def test_a_model_that_never_acts_ends_with_the_reason(demo):
    url, _ = demo
    request = {"question": QUESTION, "model": {"kind": "tiny"}, "max_turns": 2, "max_new_tokens_per_turn": 6}
    with connect(ws_url(url)) as ws:
        _, events = run_to_end(ws, request)
    turns = [e for e in events if e["type"] == "turn"]
    end = events[-1]
    assert end["type"] == "finished" and end["answer"] is None and end["scores"] is None  # no gold: not scored
    assert [t["action"] for t in turns] == ["invalid", "invalid"]
    assert "no action found" in turns[0]["error"] and "My previous action is invalid" in turns[0]["feedback"]
    assert any("never wrote a valid action in 2 turn(s)" in n for n in end["notes"])
    assert any("No gold answer given" in n for n in end["notes"])


class GenerationSpy:
    """Records each call of the engine's real `generate_sync` (the worker thread's work) and when it began."""

    def __init__(self, engine: HFEngine):
        self.entered, self.returned, self.outputs = threading.Event(), threading.Event(), []
        real = engine.generate_sync

        def spy(*args):
            self.entered.set()
            out = real(*args)
            self.outputs.append(out.outputs[0])
            self.returned.set()
            return out

        engine.generate_sync = spy


@pytest.mark.parametrize("how", ["stop", "close the page"])
def test_a_stopped_run_stops_the_engine(demo, tiny_model, how):
    import httpx

    url, app = demo
    engine = HFEngine(str(tiny_model))
    app.state.manager.models.hf_engines[str(tiny_model.resolve())] = engine
    spy = GenerationSpy(engine)
    engine.pause()  # the first call blocks before its first token, so the stop surely lands mid-generation
    request = {"question": QUESTION, "model": {"kind": "tiny"}, "max_new_tokens_per_turn": 2000, "max_turns": 1}
    try:
        with connect(ws_url(url)) as ws:
            run_id = start(ws, request)["run"]
            assert spy.entered.wait(60)
            if how == "stop":
                ws.send(json.dumps({"op": "stop", "run": run_id}))
                events = []
                while not events or events[-1]["type"] not in TERMINAL:
                    events.append(recv(ws))
                assert events[-1]["type"] == "stopped" and "told to stop generating" in events[-1]["text"]
        if how != "stop":  # the socket closed: the server cancels the page's runs
            for _ in range(600):
                if httpx.get(f"{url}/api/runs/{run_id}", headers=AUTH).json()["status"] != "running":
                    break
                threading.Event().wait(0.05)
            assert httpx.get(f"{url}/api/runs/{run_id}", headers=AUTH).json()["status"] == "stopped"
    finally:
        engine.resume()
    assert spy.returned.wait(60)
    (out,) = spy.outputs
    assert out.finish_reason == "abort" and len(out.token_ids) <= 1  # not 2000 tokens decoded for no one
    with connect(ws_url(url)) as ws:  # and the server goes on
        assert start(ws, {"question": ""})["type"] == "rejected"


def test_no_environment_secret_leaves_the_server(demo, monkeypatch):
    import httpx

    url, app = demo
    secret = SECRET
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("SERPER_API_KEY", "serper-secret-77aa")
    dead = f"{app.state.dead}/v1?key={secret}"
    with connect(ws_url(url)) as ws:
        _, events = run_to_end(ws, {"question": QUESTION, "model": {"kind": "openai", "url": dead}})
    text = json.dumps(events)
    assert secret not in text and MASK in events[-1]["text"]
    options = httpx.get(f"{url}/api/options", headers=AUTH).text
    assert "serper-secret-77aa" not in options and json.loads(options)["web_keys"]["SERPER_API_KEY"] is True


def test_only_loopback_binds_quietly(monkeypatch, capsys):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.20") and not is_loopback("demo.example.org")
    import uvicorn

    from asearcher_plugin.demo import server

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(kw))
    server.serve("0.0.0.0", 8123, ["http://127.0.0.1:5005"], "runs/tiny-model")
    server.serve("127.0.0.1", 8124, ["http://127.0.0.1:5005"], "runs/tiny-model")
    err = capsys.readouterr().err
    assert err.count("is not a loopback address") == 1 and NETWORK_WARNING.split("{")[0] in err
    assert "the keys go only to the servers given at launch" in err and "reverse proxy with TLS" in err
    assert err.count("/#token=") == 2  # each launch prints its URL with its own token (a fragment: never sent)
    assert [kw["host"] for kw in served] == ["0.0.0.0", "127.0.0.1"]


def test_a_failed_tool_call_is_shown_as_the_agent_sees_it(demo, monkeypatch):
    url, _ = demo
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    with connect(ws_url(url)) as ws:
        _, events = run_to_end(ws, reference_request(tools={"backend": "web"}, max_turns=2))
    notice = next(e for e in events if e["type"] == "notice")
    assert "SERPER_API_KEY and JINA_API_KEY not set in the server's environment" in notice["text"]
    first = next(e for e in events if e["type"] == "turn")
    assert first["action"] == "search"
    assert first["feedback"] == "\n\n<information>search failed: web search needs $SERPER_API_KEY</information>\n\n"
    assert events[-1]["type"] == "finished" and events[-1]["stats"]["tool_errors"] == 1.0
    assert any("1 tool call(s) failed" in n for n in events[-1]["notes"])


@pytest.mark.parametrize("agent_type", ["search-r1", "asearcher", "asearcher-reasoning"])
def test_replay_finds_the_prompt_and_the_turns_of_every_agent_type(agent_type, tokenizer):
    from asearcher_plugin.agent import observations
    from asearcher_plugin.agent.prompts import build_prompt, chat_prompt, information, invalid_feedback
    from asearcher_plugin.demo.replay import split_turns

    question = "Who wrote Faust"
    docs = [{"url": "u", "contents": '"Faust"\nby Goethe'}]
    block = observations.injected(observations.search_block(docs, 3).text)
    native = "x</think>\n<search>Faust</search>" + information("Doc 1(Title: Faust) [u] by Goethe")
    invalid = "<think>hm</think> nothing" + invalid_feedback("no action found; use <search> query </search>.")
    asearcher = "y</think>\n<search>Goethe</search>" + block + "He wrote it.</think>\n<answer>Goethe</answer>"
    for prompt in (build_prompt(agent_type, question), chat_prompt(tokenizer, build_prompt(agent_type, question))):
        found, turns = split_turns(prompt + native + invalid + asearcher, question)
        assert found == prompt
        assert [(t["action"], t["argument"]) for t in turns] == [
            ("search", "Faust"),
            ("invalid", ""),
            ("search", "Goethe"),
            ("answer", "Goethe"),  # a summary turn and the next have nothing between them: one row
        ]
        assert turns[2]["feedback"] == block and "by Goethe" in turns[0]["feedback"]
        assert turns[1]["feedback"].startswith("\nMy previous action is invalid: no action found")


def test_runs_go_on_at_once_and_stopping_one_leaves_the_other(demo, monkeypatch):
    pytest.importorskip("asearcher_plugin.agent.reference_policy")
    from asearcher_plugin.agent.reference_policy import ReferencePolicy

    url, _ = demo
    gate, waiting = threading.Semaphore(0), threading.Semaphore(0)
    real = ReferencePolicy.generate

    async def held(self, ids, params):  # each model call waits for the test
        waiting.release()
        await asyncio.to_thread(gate.acquire)
        return await real(self, ids, params)

    monkeypatch.setattr(ReferencePolicy, "generate", held)
    try:
        with connect(ws_url(url)) as ws:
            events: dict[str, list] = {}
            for ref, request in ((1, reference_request()), (2, reference_request(gold="Lisbon"))):
                ws.send(json.dumps({"op": "start", "ref": ref, "request": request}))
            runs = {}  # ref -> run id; the first run's events may come before the second is accepted
            while len(runs) < 2:
                event = recv(ws)
                if event["type"] == "accepted":
                    runs[event["ref"]] = event["run"]
                else:
                    events.setdefault(event["run"], []).append(event)
            first, second = runs[1], runs[2]
            events = {first: events.get(first, []), second: events.get(second, [])}
            assert waiting.acquire(timeout=60) and waiting.acquire(timeout=60)  # both runs are mid-call together
            ws.send(json.dumps({"op": "stop", "run": first}))
            gate.release()  # the stopped run's held call
            while not all(ev and ev[-1]["type"] in TERMINAL for ev in events.values()):
                event = recv(ws)
                events[event["run"]].append(event)
                if event["type"] == "turn" and not event["done"]:
                    gate.release()
                elif event["type"] == "stopped":
                    gate.release()  # and the next call of the other run
    finally:
        for _ in range(8):
            gate.release()
    assert events[first][-1]["type"] == "stopped" and not [e for e in events[first] if e["type"] == "turn"]
    end = events[second][-1]
    assert end["type"] == "finished" and end["golds"] == ["Lisbon"] and end["scores"]["em"] == 0.0
    assert [e["turn"] for e in events[second] if e["type"] == "turn"] == [1, 2, 3]


def test_an_openai_compatible_server_given_at_launch_gets_the_key_from_the_environment(
    kb_server, tiny_model, monkeypatch
):
    from transformers import AutoTokenizer

    from tests.helpers import ScriptedModel

    secret = "sk-served-model-key-9b2e77"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    model = ScriptedModel(AutoTokenizer.from_pretrained(tiny_model), {QUESTION: GOLD})
    seen = []

    @model.app.middleware("http")
    async def keys(request, call_next):
        seen.append(request.headers.get("authorization"))
        return await call_next(request)

    with serve_app(model.app) as served:
        app = create_app(
            [kb_server], tiny_model, access=Access.for_bind("127.0.0.1", token=TOKEN), model_urls=(served + "/v1",)
        )
        with serve_app(app) as url, connect(ws_url(url)) as ws:
            choice = {"kind": "openai", "url": served + "/v1", "name": "scripted", "tokenizer": str(tiny_model)}
            _, events = run_to_end(ws, {"question": QUESTION, "gold": GOLD, "model": choice})
    started = next(e for e in events if e["type"] == "started")
    assert started["model"] == f"scripted at {served}/v1"
    assert [(e["action"], e["argument"]) for e in events if e["type"] == "turn"] == [("answer", GOLD)]
    assert events[-1]["type"] == "finished" and events[-1]["scores"]["em"] == 1.0
    assert f"Bearer {secret}" in seen and secret not in json.dumps(events)
