"""A tool failure of the infrastructure is told apart from one the model caused, and is never scored in evaluation.

Knowledge-base stand-ins speak Search-R1's `POST /retrieve` on loopback (stdlib servers): one always busy (503), one
refusing the request (400, what a malformed request gets). A port where nothing listens is a dead KB.
"""

import asyncio
import http.server
import json
import threading

import pytest

from asearcher_plugin.eval.runner import load_rows, run_eval
from asearcher_plugin.settings.config import AgentConfig
from asearcher_plugin.tools import make_toolbox
from tests.helpers import ScriptedEngine, free_port


def serve(status: int) -> str:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.do_GET()

        def do_GET(self):  # noqa: N802 - Jina's reader is a GET
            body = json.dumps({"detail": "no"}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def config(url: str) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "agent_type": "asearcher",
            "max_turns": 3,
            "tools": {"local": {"urls": [url], "retries": 1, "timeout": 2.0, "check_on_start": False}},
        }
    )


def search_logs(url: str) -> dict:
    from asearcher_plugin.env import AgentInstance

    async def run():
        cfg = config(url)
        box = make_toolbox(cfg.tools)
        try:
            return await AgentInstance(cfg, box).turn("<search>Angola</search>", label="x")
        finally:
            await box.aclose()

    return asyncio.run(run()).extra_logs


@pytest.mark.parametrize(
    "where, infra",
    [("dead", 1.0), ("busy", 1.0), ("refusing", 0.0)],
)
def test_tool_failures_are_counted_by_who_caused_them(where, infra):
    url = {"dead": dead_url, "busy": lambda: serve(503), "refusing": lambda: serve(400)}[where]()
    logs = search_logs(url)
    assert logs["tool_errors"] == 1.0 and logs["tool_errors_infra"] == infra


def test_a_working_kb_counts_nothing(kb_server):
    logs = search_logs(kb_server)
    assert logs["tool_errors"] == 0.0 and logs["tool_errors_infra"] == 0.0


def test_an_outage_in_evaluation_is_failed_and_runs_again_on_resume(tmp_path, tokenizer, kb_server):
    items = [{"dataset": "d", "id": "q1", "question": "Which ocean lies west of Angola?", "golden_answers": ["x"]}]
    turns = [("<search>Angola coast</search>", "stop"), ("<answer>Atlantic</answer>", "stop")]

    def evaluate(url, out=tmp_path / "resumed"):
        engine = ScriptedEngine(tokenizer, turns)
        asyncio.run(run_eval(items, config(url), engine, tokenizer, out, progress=False))
        return {r.key: r for r in load_rows(out)}[("d", "q1", 0)]

    def metrics(out):
        return {k: v for k, v in json.loads((out / "metrics.json").read_text()).items() if k != "card"}

    down = evaluate(dead_url())
    assert down.status == "failed" and "infrastructure" in down.error and down.reward is None
    up = evaluate(kb_server)  # the resumed run tries it again, and its score replaces the failure
    assert up.status == "ok" and up.logs["tool_errors_infra"] == 0.0 and up.answer == "Atlantic"
    # after the resume, the metrics are those of a run the outage never touched
    evaluate(kb_server, tmp_path / "uninterrupted")
    assert metrics(tmp_path / "resumed") == metrics(tmp_path / "uninterrupted")


@pytest.mark.parametrize("tool, status", [("search", 429), ("search", 503), ("access", 429), ("access", 503)])
def test_serper_and_jina_answering_429_or_503_are_the_infrastructures(tool, status, monkeypatch):
    """Serper (search) and Jina (page access) stand-ins that answer every request with `status`: after the client's
    retries the call fails as ToolUnavailable and counts as the infrastructure's, not the model's."""
    from asearcher_plugin.env import AgentInstance

    url = serve(status)
    monkeypatch.setenv("SERPER_API_KEY", "test-key")
    monkeypatch.setenv("JINA_API_KEY", "test-key")
    cfg = AgentConfig.model_validate(
        {
            "agent_type": "asearcher",
            "max_turns": 3,
            "tools": {
                "backend": "web",
                "web": {
                    "serper_url": f"{url}/search",
                    "jina_url": f"{url}/jina/",
                    "retries": 1,
                    "timeout": 2.0,
                    "allow_private_hosts": ["127.0.0.1"],
                },
            },
        }
    )
    action = "<search>capital of Angola</search>" if tool == "search" else f"<access>{url}/page</access>"

    async def run():
        box = make_toolbox(cfg.tools)
        try:
            return await AgentInstance(cfg, box).turn(action, label="x")
        finally:
            await box.aclose()

    logs = asyncio.run(run()).extra_logs
    assert logs["tool_errors"] == 1.0 and logs["tool_errors_infra"] == 1.0, logs
