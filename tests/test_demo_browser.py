"""The demo page in a real headless Chromium, driven over the DevTools protocol.

A sample question against the sample KB server with the scripted reference policy: each model call is held until
the test lets it go, so what the page shows between two calls is what it shows while the run is in progress; a
run is stopped from its button; an `asearcher eval` trajectories.jsonl is opened and replayed turn by turn; and
a screenshot is taken ($DEMO_SCREENSHOT also saves it there, e.g. docs/img/demo.png).
"""

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from asearcher_plugin.demo import server
from asearcher_plugin.demo.guard import Access
from asearcher_plugin.demo.server import create_app
from tests.helpers import CHROMIUM, CHROMIUM_FLAGS, serve_app

pytestmark = pytest.mark.browser
FLAGS = [*CHROMIUM_FLAGS, "--hide-scrollbars"]
QUESTION, GOLD = "What is the capital and largest city of Angola?", "Luanda"


class Page:
    """One Chromium tab over the DevTools protocol (JSON over a WebSocket)."""

    def __init__(self, profile: Path):
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: list[str] = []
        browser_ws = None
        for line in self.proc.stderr:
            self.log.append(line)
            if line.startswith("DevTools listening on "):
                browser_ws = line.split(" on ", 1)[1].strip()
                break
        assert browser_ws, "".join(self.log[-20:])
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()  # keep the pipe open
        port = browser_ws.split(":")[2].split("/")[0]
        target = next(t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json() if t["type"] == "page")
        self.ws = connect(target["webSocketDebuggerUrl"], max_size=None)
        self.ids, self.exceptions = 0, []
        self.call("Runtime.enable")
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=1400, height=1050, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params) -> dict:
        self.ids += 1
        self.ws.send(json.dumps({"id": self.ids, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("method") == "Runtime.exceptionThrown":
                self.exceptions.append(msg["params"]["exceptionDetails"])
            if msg.get("id") == self.ids:
                assert "error" not in msg, msg
                return msg["result"]

    def js(self, expression: str):
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in out, out
        return out["result"].get("value")

    def wait(self, expression: str, what: str, limit: float = 60.0):
        """Polls until `expression` is truthy: waiting for the page, not timing it."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            value = self.js(f"(() => {{ try {{ return !!({expression}); }} catch (e) {{ return false; }} }})()")
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"the page never showed {what}")

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self):
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def eval_file(tmp_path: Path, tokenizer, kb_url: str) -> Path:
    """A real `asearcher eval` output: two sample questions answered by the reference policy, one failed row."""
    from asearcher_plugin.agent.reference_policy import ReferencePolicy
    from asearcher_plugin.eval.datasets import load_dataset
    from asearcher_plugin.eval.runner import run_eval
    from asearcher_plugin.settings.config import AgentConfig

    items = load_dataset("sample", limit=2)
    config = AgentConfig.model_validate({"agent_type": "asearcher", "tools": {"local": {"urls": [kb_url]}}})
    policy = ReferencePolicy.for_items(tokenizer, config, items)
    out = tmp_path / "eval"
    asyncio.run(run_eval(items, config, policy, tokenizer, out, max_length=4096, progress=False))
    path = out / "trajectories.jsonl"
    failed = {"id": "x9", "dataset": "sample", "seed": 0, "question": "q", "golden_answers": ["a"]}
    with path.open("a") as fh:
        fh.write(json.dumps({**failed, "status": "failed", "error": "EngineUnavailable: no server answered"}) + "\n")
    return path


real_read_lines = server.read_lines


def attacker_app(demo: str, token: str, seen: list[dict]):
    """A page of another origin that tries the demo's socket (with the token) and a no-preflight POST; `seen` gets
    the headers of every request the browser sends it."""
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse

    ws = demo.replace("http://", "ws://")
    script = f"""
      window.outcome = {{}};
      const s = new WebSocket("{ws}/ws?token={token}");
      s.onopen = () => {{ s.send(JSON.stringify({{op: "start", ref: 1, request: {{question: "q"}}}}));
                          window.outcome.ws = "opened"; }};
      s.onerror = () => {{ window.outcome.ws = window.outcome.ws || "refused"; }};
      fetch("{demo}/api/replay?token={token}", {{method: "POST", body: "{{}}", credentials: "include",
             headers: {{"Content-Type": "text/plain"}}}})
        .then(r => {{ window.outcome.post = "answered " + r.status; }})
        .catch(() => {{ window.outcome.post = "refused"; }});
    """
    app = FastAPI()

    @app.get("/")
    async def page(request: Request):
        seen.append(dict(request.headers))
        return HTMLResponse(f"<!doctype html><title>elsewhere</title><script>{script}</script>")

    return app


def turns(page: Page, card: str) -> list[str]:
    return page.js(f"[...document.querySelectorAll('{card} .turn')].map(t => t.dataset.turn + ':' + t.dataset.action)")


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is installed by scripts/test.sh")
def test_demo_page_streams_stops_and_replays_in_chromium(kb_server, tiny_model, tokenizer, tmp_path, monkeypatch):
    from asearcher_plugin.agent.reference_policy import ReferencePolicy

    replay_path = eval_file(tmp_path, tokenizer, kb_server)
    gate = threading.Semaphore(0)  # one model call per release
    real = ReferencePolicy.generate

    async def held(self, ids, params):
        await asyncio.to_thread(gate.acquire)
        return await real(self, ids, params)

    monkeypatch.setattr(ReferencePolicy, "generate", held)
    replays = []
    monkeypatch.setattr(server, "read_lines", lambda text: replays.append(len(text)) or real_read_lines(text))
    access = Access.for_bind("127.0.0.1")
    app = create_app(kb_server, tiny_model, access=access)
    page = None
    elsewhere: list[dict] = []
    with serve_app(app) as url, serve_app(attacker_app(url, access.token, elsewhere)) as attacker:
        try:
            page = Page(tmp_path / "profile")
            page.call("Page.navigate", url=f"{url}/#token={access.token}")
            page.wait("document.getElementById('conn').textContent === 'connected'", "the socket connected")
            assert access.token not in page.js("location.href")  # out of the address bar and the history
            page.wait("document.querySelector('#model-kind option[value=reference]')", "the reference policy choice")
            assert page.js("document.getElementById('kb-url').value") == kb_server

            # replay an eval file, turn by turn
            doc = page.call("DOM.getDocument")
            node = page.call("DOM.querySelector", nodeId=doc["root"]["nodeId"], selector="#replay-file")
            page.call("DOM.setFileInputFiles", files=[str(replay_path)], nodeId=node["nodeId"])
            page.wait("document.querySelector('.run.replay .replay-nav')", "the replayed trajectory")
            assert page.js("document.querySelectorAll('.run.replay .pick').length") == 3
            assert page.js("document.querySelector('.run.replay .pos').textContent") == "0 of 3 turns"
            page.js("document.querySelector('.run.replay .next').click()")
            assert turns(page, ".run.replay") == ["1:search"]
            page.js("document.querySelector('.run.replay .next').click()")
            assert turns(page, ".run.replay") == ["1:search", "2:access"]
            assert not page.js("document.querySelector('.run.replay .result')")  # the answer comes with its turn
            page.js("document.querySelector('.run.replay .all').click()")
            assert turns(page, ".run.replay") == ["1:search", "2:access", "3:answer"]
            assert "Luanda" in page.js("document.querySelector('.run.replay .result').textContent")
            page.js("document.querySelectorAll('.run.replay .pick')[2].click()")
            assert "failed: EngineUnavailable" in page.js("document.querySelector('.run.replay .err').textContent")

            # a run that is stopped from its button while the model is at work
            page.js("document.getElementById('question').value = 'Which ocean lies west of Angola?'")
            page.js("document.getElementById('model-kind').value = 'reference'")
            page.js("document.getElementById('ask-button').click()")
            page.wait("document.querySelector('#run-r1')?.dataset.status === 'running'", "run r1 running")
            page.js("document.querySelector('#run-r1 .stop').click()")
            page.wait("document.querySelector('#run-r1')?.dataset.status === 'stopped'", "run r1 stopped")
            assert "stopped" in page.js("document.querySelector('#run-r1 .err').textContent")
            assert turns(page, "#run-r1") == []
            gate.release()  # the stopped run's call, held in its thread, is let go

            # the sample question, typed, watched turn by turn while it runs
            page.js("document.getElementById('question').value = ''; document.getElementById('question').focus()")
            page.call("Input.insertText", text=QUESTION)
            page.js(f"document.getElementById('gold').value = {json.dumps(GOLD)}")
            page.js("document.getElementById('ask-button').click()")
            card = "#run-r2"
            page.wait(f"document.querySelector('{card}')?.dataset.status === 'running'", "run r2 running")
            expected = ["1:search", "2:access", "3:answer"]
            for n in range(1, 4):
                gate.release()
                page.wait(f"document.querySelectorAll('{card} .turn').length === {n}", f"turn {n}")
                assert turns(page, card) == expected[:n]
                if n < 3:  # in progress: the turns so far, the next one announced, no result yet
                    assert page.js(f"document.querySelector('{card}').dataset.status") == "running"
                    waiting = page.js(f"document.querySelector('{card} .waiting')?.textContent")
                    assert waiting == f"turn {n + 1}: the model is writing"
                    assert not page.js(f"document.querySelector('{card} .result')")
            page.wait(f"document.querySelector('{card}').dataset.status === 'finished'", "run r2 finished")
            first = page.js(f"document.querySelector('{card} .turn .arg').textContent")
            assert first == QUESTION
            assert "Doc 1(Title: Angola)" in page.js(f"document.querySelector('{card} .turn .doc b').textContent")
            result = page.js(f"document.querySelector('{card} .result').textContent")
            assert "answer: Luanda" in result and "1 searches" in result and "1 pages read" in result
            assert page.js(f"[...document.querySelectorAll('{card} .scores td')].map(t => t.textContent)")[:2] == [
                "1.000",
                "1.000",
            ]
            assert page.js(f"document.querySelector('{card} a[download]').hidden") is False

            shot = tmp_path / "demo.png"
            page.screenshot(shot)
            assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
            if os.environ.get("DEMO_SCREENSHOT"):
                shutil.copy(shot, os.environ["DEMO_SCREENSHOT"])
            assert page.exceptions == [], page.exceptions

            # A second local server, on another port of 127.0.0.1, opened in the same browser: the browser sends
            # it nothing of the demo's token (a cookie would go to every port of the host). Its page, even knowing
            # the token, can neither open the socket nor post a file.
            runs, read = len(app.state.manager.runs), len(replays)
            page.call("Page.navigate", url=attacker + "/")
            page.wait("window.outcome && window.outcome.ws && window.outcome.post", "the other origin's attempts")
            assert elsewhere and not any(access.token in str(headers) for headers in elsewhere), elsewhere
            outcome = page.js("window.outcome")
            assert outcome == {"ws": "refused", "post": "refused"}, outcome
            assert len(app.state.manager.runs) == runs and len(replays) == read  # nothing started, nothing read
        finally:
            for _ in range(8):
                gate.release()  # nothing stays blocked on the gate
            if page is not None:
                page.close()
