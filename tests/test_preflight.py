"""A rollout engine refuses to start when its node reaches no KB server (multi-node runs pointing at 127.0.0.1)."""

import json
import os
import socket
import subprocess
import sys

from asearcher_plugin.tools.config import LocalToolsConfig
from tests.helpers import free_port


def build_as_openrlhf(run_config: dict | None, path=None) -> subprocess.CompletedProcess:
    """What OpenRLHF's rollout actor does: load the agent file by path, build AgentExecutor() with no arguments.
    `run_config`: what the launcher puts in Ray's runtime env (None: nothing arrives, as on a pre-started cluster)."""
    from asearcher_plugin.env import agent_file

    probe = (
        "import importlib.util, sys; s = importlib.util.spec_from_file_location('agent_module', sys.argv[1]); "
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); e = m.AgentExecutor(); "
        "print('ready', e.config.agent_type, e.config.max_turns)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("ASEARCHER_RUN_CONFIG", "ASEARCHER_CONFIG")}
    if run_config is not None:
        env["ASEARCHER_RUN_CONFIG"] = json.dumps(run_config)
    return subprocess.run(
        [sys.executable, "-c", probe, str(path or agent_file())], capture_output=True, text=True, env=env, timeout=120
    )


def test_unreachable_kb_fails_at_start_naming_node_and_urls():
    dead = f"http://127.0.0.1:{free_port()}"
    proc = build_as_openrlhf({"agent": {"tools": {"local": {"urls": [dead]}}}})
    assert proc.returncode != 0 and "no knowledge-base server reachable from node" in proc.stderr
    assert dead in proc.stderr and socket.gethostname() in proc.stderr


def test_one_reachable_server_is_enough(kb_server):
    dead = f"http://127.0.0.1:{free_port()}"
    proc = build_as_openrlhf({"agent": {"tools": {"local": {"urls": [dead, kb_server]}}}})
    assert proc.returncode == 0 and "ready" in proc.stdout


def test_the_check_can_be_turned_off_and_is_not_made_for_explicit_configs():
    from asearcher_plugin.env import AgentExecutor
    from asearcher_plugin.settings.config import AgentConfig

    dead = f"http://127.0.0.1:{free_port()}"
    off = build_as_openrlhf({"agent": {"tools": {"local": {"urls": [dead], "check_on_start": False}}}})
    assert off.returncode == 0
    # eval and `asearcher rollout` pass their config: tool failures there are counted per item instead
    AgentExecutor(AgentConfig.model_validate({"tools": {"local": {"urls": [dead]}}}))
    assert LocalToolsConfig().check_on_start


def test_the_plain_openrlhf_command_never_trains_on_defaults(tmp_path, kb_server):
    """`--train.agent_func_path $(python -m asearcher_plugin.env)` on a cluster where no config arrives: refused
    with how to fix it; with a per-run agent file the config travels in the file and no variable is needed."""
    refused = build_as_openrlhf(None)
    assert refused.returncode != 0 and "no agent config reached this rollout actor" in refused.stderr
    assert "python -m asearcher_plugin.env --config run.yaml" in refused.stderr
    run = tmp_path / "run.yaml"
    run.write_text(f"agent:\n  agent_type: asearcher\n  max_turns: 7\n  tools: {{local: {{urls: ['{kb_server}']}}}}\n")
    made = subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.env", "--config", str(run)], capture_output=True, text=True
    )
    assert made.returncode == 0 and "WITHOUT the streaming scheduler" in made.stderr, made.stderr
    agent = made.stdout.strip()
    assert agent == str(tmp_path / "run_agent.py")
    built = build_as_openrlhf(None, path=agent)
    assert built.returncode == 0 and "ready asearcher 7" in built.stdout, built.stderr
    assert "WITHOUT the streaming scheduler" in built.stderr  # said again in every rollout actor
    bad = tmp_path / "bad.yaml"
    bad.write_text("agent:\n  max_turns: 0\n")
    refused = subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.env", "--config", str(bad)], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "max_turns" in refused.stderr and "Traceback" not in refused.stderr


# --- servers of another make: exactly the endpoints Search-R1's and ASearcher's retrieval servers have ----------

ROWS = [{"id": "0", "contents": '"George Orwell"\nGeorge Orwell wrote Animal Farm, published in 1945.'}]


def peer_server(with_access: bool):
    """A stdlib HTTP server with Search-R1's `POST /retrieve` (and ASearcher's `POST /access`) and nothing else:
    `GET /health` gets http.server's own 501, as in the reproduction."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/retrieve":
                k = body.get("topk", 3)
                hits = [{"document": r, "score": 0.9} if body.get("return_scores") else r for r in ROWS[:k]]
                out = {"result": [hits for _ in body["queries"]]}
            elif self.path == "/access" and with_access:
                out = {"result": [{"url": u, "contents": ROWS[0]["contents"]} for u in body["urls"]]}
            else:
                self.send_error(404)
                return
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_search_r1_and_asearcher_servers_pass_the_start_up_check():
    import httpx

    for with_access in (False, True):
        server, url = peer_server(with_access)
        try:
            assert httpx.get(f"{url}/health").status_code == 501  # what the old check asked for
            proc = build_as_openrlhf({"agent": {"tools": {"local": {"urls": [url]}}}})
            assert proc.returncode == 0 and "ready" in proc.stdout, proc.stderr[-2000:]
        finally:
            server.shutdown()


def test_a_server_that_does_not_answer_retrieve_is_unreachable(kb_server):
    from fastapi import FastAPI

    from asearcher_plugin.settings.config import ConfigError
    from asearcher_plugin.tools.preflight import check_kb_reachable
    from tests.helpers import serve_app

    app = FastAPI()  # up and healthy, but not a retrieval server (a wrong port, another service)

    @app.get("/health")
    def health():
        return {"ok": True}

    @app.post("/retrieve")
    def retrieve():
        return {"results": []}

    with serve_app(app) as url:
        try:
            check_kb_reachable(LocalToolsConfig(urls=[url]), attempts=1, timeout=5)
            raise AssertionError("a server without a /retrieve result passed")
        except ConfigError as exc:
            assert url in str(exc) and "without a result" in str(exc)
    check_kb_reachable(LocalToolsConfig(urls=[kb_server]), attempts=1, timeout=30)


def test_the_agent_searches_a_search_r1_server_as_openrlhf_builds_it(tokenizer, monkeypatch):
    """The held-out check: AgentExecutor built by OpenRLHF's contract, its searches answered by a server that has
    only `POST /retrieve`."""
    import asyncio

    from asearcher_plugin.engines.types import SamplingParams
    from tests.helpers import ScriptedEngine

    server, url = peer_server(with_access=False)
    monkeypatch.setenv(
        "ASEARCHER_RUN_CONFIG",
        json.dumps(
            {"agent": {"agent_type": "search-r1", "max_turns": 3, "tools": {"local": {"urls": [url], "retries": 0}}}}
        ),
    )
    try:
        from asearcher_plugin.env import AgentExecutor

        executor = AgentExecutor()
        script = [("<search>author of Animal Farm</search>", "stop"), ("<answer>George Orwell</answer>", "stop")]
        out = asyncio.run(
            executor.execute(
                "Who wrote Animal Farm?",
                '["George Orwell"]',
                SamplingParams(temperature=1.0, max_tokens=None, logprobs=1),
                1024,
                tokenizer,
                ScriptedEngine(tokenizer, script),
            )
        )
    finally:
        server.shutdown()
    logs = out["extra_logs"]
    assert logs["searches"] == 1.0 and logs["tool_errors"] == 0.0 and out["reward"] == 1.0
    assert "published in 1945" in tokenizer.decode(out["observation_tokens"])
