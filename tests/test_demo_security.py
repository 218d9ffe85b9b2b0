"""`asearcher demo` probed as an attacker would, over real HTTP and WebSocket on loopback.

A page of another origin cannot open the socket or post a file; a request without the launch's token, or for a
Host the server does not serve (DNS rebinding), is refused; a URL typed into the page never gets a request, let
alone the API key (a capture server on loopback must see nothing); the KB check never quotes a foreign reply; a
large adversarial replay is read linearly off the event loop while other requests are answered; a trajectories
file cannot put markup into report.html.
"""

import json
import threading
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from asearcher_plugin.demo.guard import Access, host_name
from asearcher_plugin.demo.server import MAX_REPLAY_BYTES, create_app
from asearcher_plugin.records import EvalRow, RowError
from tests.helpers import free_port, serve_app

TOKEN = "launch-token-of-the-security-tests"
AUTH = {"Authorization": f"token {TOKEN}"}
KEY = "sk-openai-key-the-capture-server-must-never-see"


class Capture:
    """A loopback server that records every request it gets, and answers like an internal admin service."""

    def __init__(self):
        self.seen: list[dict] = []
        self.app = FastAPI()
        self.app.api_route("/{path:path}", methods=["GET", "POST"])(self.any)

    async def any(self, path: str, request: Request):
        self.seen.append({"path": path, "auth": request.headers.get("authorization"), "body": await request.body()})
        return {"admin_secret": "internal-reply-body-7d1e", "users": ["root"]}


@pytest.fixture(scope="module")
def capture():
    cap = Capture()
    with serve_app(cap.app) as url:
        yield cap, url


@pytest.fixture(scope="module")
def demo(tiny_model, capture):
    _, internal = capture
    # the operator's launch: a KB (no run here gets as far as searching it), and for the read-back probe an internal
    # service given as a KB URL
    kb_urls = [f"http://127.0.0.1:{free_port()}", internal + "/admin?x="]
    app = create_app(kb_urls, tiny_model, access=Access.for_bind("127.0.0.1", token=TOKEN))
    with serve_app(app) as url:
        yield url


def ws(base: str, token: str | None = TOKEN, origin: str | None = None):
    headers = {"Origin": origin} if origin else {}
    query = f"?token={token}" if token else ""
    return connect(base.replace("http://", "ws://") + "/ws" + query, additional_headers=headers, open_timeout=10)


def handshake(base: str, host: str) -> int:
    """The status a WebSocket handshake with this Host header gets, over a raw socket (clients set their own Host)."""
    import socket

    port = int(base.rsplit(":", 1)[1])
    request = (
        f"GET /ws?token={TOKEN} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request.encode())
        return int(conn.recv(1024).split(b" ", 2)[1])


def start(sock, request: dict) -> list[dict]:
    """The reply to a start and, when accepted, every event to the run's end."""
    sock.send(json.dumps({"op": "start", "ref": 1, "request": request}))
    events = [json.loads(sock.recv(timeout=60))]
    while events[0]["type"] == "accepted" and events[-1]["type"] not in {"finished", "stopped", "error"}:
        events.append(json.loads(sock.recv(timeout=60)))
    return events


def test_the_socket_takes_only_the_pages_own_origin_with_the_token(demo):
    port = demo.rsplit(":", 1)[1]
    for token, origin in [
        (TOKEN, "http://attacker.example"),  # another site
        (TOKEN, "http://127.0.0.1:9"),  # another port of this machine: same site, other origin
        (TOKEN, "null"),  # a sandboxed frame or a file
        (None, f"http://127.0.0.1:{port}"),  # the right origin without the token
        ("wrong-token", None),
    ]:
        with pytest.raises(InvalidStatus) as refused:
            ws(demo, token, origin).close()
        assert refused.value.response.status_code == 403, (token, origin)
    with ws(demo, TOKEN, f"http://127.0.0.1:{port}") as sock:  # the page itself
        sock.send(json.dumps({"op": "stop", "run": "r0"}))
        assert "r0 is not running" in json.loads(sock.recv(timeout=10))["error"]


def test_the_token_is_never_a_cookie_and_goes_by_header_or_subprotocol(demo):
    """Cookies are scoped by host, not port: one set by the demo would go to every other server on 127.0.0.1."""
    page = httpx.get(demo + "/")
    assert page.status_code == 200 and TOKEN not in page.text  # the page holds no data and no token
    assert httpx.get(demo + "/api/options").status_code == 403
    assert httpx.get(demo + "/static/demo.js").status_code == 200  # no data, no state: served to anyone
    opened = httpx.get(demo + f"/?token={TOKEN}")  # the URL of older versions
    assert opened.status_code == 200 and "set-cookie" not in opened.headers
    old_cookie = {f"asearcher_demo_{demo.rsplit(':', 1)[1]}": TOKEN}
    assert httpx.get(demo + "/api/options", cookies=old_cookie).status_code == 403  # a cookie is no credential
    assert httpx.get(demo + "/api/options", headers=AUTH).status_code == 200
    # the page's socket: the token as a subprotocol (a page cannot give the handshake a header), never echoed
    url = demo.replace("http://", "ws://") + "/ws"
    with connect(url, subprotocols=["asearcher-demo", f"token.{TOKEN}"], open_timeout=10) as sock:
        assert sock.subprotocol == "asearcher-demo"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, subprotocols=["asearcher-demo", "token.guess"], open_timeout=10).close()
    assert refused.value.response.status_code == 403


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8000", "127.0.0.1.nip.io", "[::2]:80", "["])
def test_a_host_the_server_does_not_serve_is_refused(demo, host):
    """DNS rebinding: a name the attacker controls, re-resolved to 127.0.0.1, reaches the port with its own Host."""
    for path in ("/", "/api/options", "/api/runs/r1"):
        reply = httpx.get(demo + path, headers={**AUTH, "Host": host})
        assert reply.status_code == 400 and "is not one this demo serves" in reply.text, (path, reply.text)
    assert handshake(demo, host) == 403
    assert handshake(demo, "localhost") == 101
    assert httpx.get(demo + "/api/options", headers={**AUTH, "Host": "localhost:1"}).status_code == 200


def test_hosts_of_a_bind(monkeypatch):
    assert host_name("[::1]:8000") == "::1" and host_name("Example.ORG:80") == "example.org" and host_name("[") == ""
    loop = Access.for_bind("127.0.0.1", token="t")
    assert loop.hosts == {"127.0.0.1", "localhost", "::1"} and loop.token == "t"
    assert "10.0.0.5" in Access.for_bind("10.0.0.5").hosts
    assert "demo.internal" in Access.for_bind("0.0.0.0", ("demo.internal",)).hosts
    assert Access.for_bind("127.0.0.1").token != Access.for_bind("127.0.0.1").token  # a new secret each launch


def test_a_url_typed_into_the_page_gets_no_request_and_no_key(demo, capture, monkeypatch):
    cap, internal = capture
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    before = len(cap.seen)
    with ws(demo) as sock:
        model = {"kind": "openai", "url": internal + "/v1", "name": "m", "tokenizer": "t"}
        (reply,) = start(sock, {"question": "q", "model": model})
        assert reply["type"] == "rejected" and "not one this demo was started with" in reply["error"]
        (reply,) = start(sock, {"question": "q", "model": {"kind": "reference"}, "tools": {"kb_url": internal}})
        assert reply["type"] == "rejected" and "KB URL" in reply["error"] and "--kb-url" in reply["error"]
    assert cap.seen[before:] == []  # nothing reached it: no key, no port scan, no read-back


def test_the_kb_check_never_quotes_a_foreign_reply(demo, capture):
    """A KB URL given at launch that is not a KB (an admin service): the page learns that, not what it answered."""
    cap, internal = capture
    with ws(demo) as sock:
        request = {"question": "q", "model": {"kind": "reference"}, "tools": {"kb_url": internal + "/admin?x="}}
        events = start(sock, request)
    assert events[0]["type"] == "accepted" and events[-1]["type"] == "error"
    assert "is not reachable or not a KB server" in events[-1]["text"]
    assert cap.seen and "internal-reply-body-7d1e" not in json.dumps(events) and "root" not in json.dumps(events)


def test_the_preflight_error_names_the_status_not_the_body(capture):
    from asearcher_plugin.tools.preflight import answers_retrieve

    _, internal = capture
    with pytest.raises(ValueError) as err:
        answers_retrieve(internal, 5.0)
    assert "HTTP 200" in str(err.value) and "internal-reply-body-7d1e" not in str(err.value)


def _adversarial_replay() -> bytes:
    """One line per pattern a non-greedy scan handles in quadratic time, up to just under the size limit."""
    turns = [
        "</search> <information>x</information>",
        "<information>",
        " " * 64 + "x",
        "My previous action is invalid: ",
    ]
    lines, size = [], 0
    n = 0
    while size < MAX_REPLAY_BYTES - 400_000:
        text = turns[n % len(turns)] * (80_000 // len(turns[n % len(turns)]))
        row = {"id": f"a{n}", "dataset": "x", "seed": 0, "question": "q", "golden_answers": ["a"], "text": text}
        lines.append(json.dumps(row))
        size += len(lines[-1]) + 1
        n += 1
    return ("\n".join(lines) + "\n").encode()


def test_a_large_adversarial_replay_does_not_hold_other_requests(demo):
    body = _adversarial_replay()
    result = {}

    def post():
        result["reply"] = httpx.post(demo + "/api/replay", content=body, headers=AUTH, timeout=300)

    poster = threading.Thread(target=post)
    poster.start()
    gaps = []
    with httpx.Client(headers=AUTH, timeout=300) as client:
        while poster.is_alive():
            began = time.monotonic()
            assert client.get(demo + "/api/options").status_code == 200
            gaps.append(time.monotonic() - began)
    poster.join()
    reply = result["reply"]
    assert reply.status_code == 200, reply.text[:300]
    assert len(reply.json()["rows"]) == body.count(b"\n")
    assert len(gaps) >= 3  # other requests were answered while the file was read
    # Generous on 2 shared cores: the quadratic reader held the whole server for 14.5 s on a 48 KB file.
    assert max(gaps) < 1.5, gaps


def test_replay_is_read_off_the_event_loop(demo, monkeypatch):
    """The file is read in a worker thread: while it is being read, the server answers another request."""
    from asearcher_plugin.demo import server

    real, answered = server.read_lines, threading.Event()

    def reader(text):
        if not answered.wait(30):
            raise RuntimeError("no other request was answered while the file was read")
        return real(text)

    monkeypatch.setattr(server, "read_lines", reader)
    line = json.dumps({"id": "a", "dataset": "x", "seed": 0, "question": "q", "golden_answers": [], "text": "t"})
    result = {}
    poster = threading.Thread(
        target=lambda: result.update(r=httpx.post(demo + "/api/replay", content=line, headers=AUTH, timeout=60))
    )
    poster.start()
    try:
        assert httpx.get(demo + "/api/options", headers=AUTH, timeout=20).status_code == 200
    finally:
        answered.set()
        poster.join()
    assert result["r"].status_code == 200


def test_replay_refuses_other_origins_and_large_files(demo):
    line = json.dumps({"id": "a", "dataset": "x", "seed": 0, "question": "q", "golden_answers": [], "text": "t"})
    # a text/plain POST needs no CORS preflight, so any page can send one: it names its origin
    other = httpx.post(demo + "/api/replay", content=line, headers={**AUTH, "Origin": "http://attacker.example"})
    assert other.status_code == 403 and "another origin" in other.json()["error"]
    big = httpx.post(demo + "/api/replay", content=b"x" * (MAX_REPLAY_BYTES + 1), headers=AUTH)
    assert big.status_code == 413
    assert httpx.post(demo + "/api/replay", content=line, headers=AUTH).status_code == 200


def test_a_chunked_upload_is_refused_at_the_limit_not_read_to_its_end(demo):
    """A chunked body names no size: the server stops at the limit and answers, while the sender is still sending
    (one that read to the end would wait here for a body that never ends)."""
    import socket

    port = int(demo.rsplit(":", 1)[1])
    chunk = b"x" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(
            f"POST /api/replay HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: token {TOKEN}\r\n"
            "Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        for _ in range(MAX_REPLAY_BYTES // len(chunk) + 1):
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))  # never the last, empty chunk
        reply = conn.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]


def test_a_replayed_question_is_matched_without_compiling_it(monkeypatch):
    """The question comes from a file anyone wrote: compiled into a pattern it cost 78 s for 1.75 MB, and Python's
    pattern cache grew with every distinct question. It is matched as text, in time linear in its length."""
    import re

    from asearcher_plugin.agent.prompts import template_for
    from asearcher_plugin.agent.text_turns import turn_spans

    question = "Zyxqv (a+)+$ [x" + " of the river" * 150_000  # 1.95 MB, with pattern syntax in it
    prompt = template_for("asearcher").format(question=question, current_date="2026-11-28")
    text = prompt + "<search>Zyxqv</search>\n\n<information>doc</information>\n\n<answer>Luanda</answer>"
    compiled = []
    real = re._compile
    monkeypatch.setattr(re, "_compile", lambda pattern, flags: compiled.append(str(pattern)) or real(pattern, flags))
    cut, spans = turn_spans(text, question)
    assert cut == len(prompt) and [text[a:b] for a, b, _ in spans] == [
        "<search>Zyxqv</search>",
        "<answer>Luanda</answer>",
    ]
    assert not any("Zyxqv" in pattern for pattern in compiled)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seed", "<img src=x onerror=alert(1)>"),
        ("id", ["<b>"]),
        ("scores", {"<img src=x onerror=alert(1)>": 1.0}),
        ("scores", {"f1": "<script>"}),
        ("logs", {"turns": {"x": 1}}),
        ("golden_answers", [{"a": 1}]),
        ("status", "<i>ok</i>"),
        ("truncated", "yes"),
    ],
)
def test_a_trajectory_line_of_the_wrong_types_is_refused_by_field(field, value):
    row = {"id": "q1", "dataset": "d", "seed": 0, "question": "q", "golden_answers": ["a"], "status": "ok"}
    with pytest.raises(RowError) as err:
        EvalRow.from_json({**row, field: value})
    assert repr(field) in str(err.value)
    EvalRow.from_json(row)  # the same line with the right types reads


def test_the_report_escapes_every_field_of_a_trajectories_file():
    from asearcher_plugin.eval.report import render_html

    evil = "<img src=x onerror=alert(1)>"
    rows = [
        EvalRow(
            "d" + evil, "id" + evil, 0, "q" + evil, ["g" + evil], answer=evil, text="t" + evil, scores={"f1": 1.0}
        ),
        EvalRow("d", "i2", 1, "q", ["g"], status="failed", error=evil),
    ]
    rows[0].seed = evil  # a row built in code is not checked; the report must still escape it
    ci = [0.0, 1.0]
    metric = {"questions": 1, "avg@1": 1.0, "avg@1_ci95": ci, "pass@1": 1.0, "pass@1_ci95": ci}
    metrics = {"k": 1, "items_ok": 1, "items_failed": 1, "datasets": {"d" + evil: {evil: metric, "f1": metric}}}
    page = render_html(metrics, rows)
    assert "<img src=x" not in page and page.count("&lt;img src=x onerror=alert(1)&gt;") >= 7


def test_the_prompts_own_information_tags_are_not_drawn_as_tool_output(tokenizer):
    from asearcher_plugin.agent.prompts import template_for
    from asearcher_plugin.eval.report import _turns_html

    question = "What is the capital of Angola?"
    prompt = template_for("search-r1").replace("{question}", question)
    assert "<information>" in prompt  # the packaged prompt explains the tags in words
    text = prompt + "<search>Angola</search><information>Doc 1: Luanda</information><answer>Luanda</answer>"
    page = _turns_html(text, question)
    assert page.count('class="tool"') == 1 and "Doc 1: Luanda" in page.split('class="tool"')[1]
    assert page.count('class="prompt"') == 1


def test_a_tokenizer_name_never_reaches_a_hub_and_loaded_models_are_bounded(monkeypatch):
    import asyncio

    from transformers import AutoTokenizer

    from asearcher_plugin.demo import models

    asked = []

    def loader(name, **kw):
        asked.append(kw)
        raise OSError("not a local folder")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", loader)
    monkeypatch.setattr(models, "_check_server", lambda url: asyncio.sleep(0))
    m = models.Models("unused")
    choice = models.ModelChoice(kind="openai", url="http://127.0.0.1:1/v1", name="org/model")
    with pytest.raises(models.ModelError, match="no model hub is reached"):
        asyncio.run(m._openai(choice))
    assert asked == [{"local_files_only": True}]

    monkeypatch.setattr(models, "_load_hf", lambda path, tiny: object())
    for n in range(5):
        asyncio.run(m._hf_engine(f"/models/m{n}"))
    assert list(m.hf_engines) == ["/models/m3", "/models/m4"] and models.MAX_LOADED == 2


def test_a_wildcard_bind_says_what_it_exposes(capsys, monkeypatch):
    import uvicorn

    from asearcher_plugin.demo import server

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    server.serve("0.0.0.0", free_port(), ["http://127.0.0.1:5005"], "runs/tiny-model")
    err = capsys.readouterr().err
    assert "only to the servers given at launch" in err and "holds the access token" in err
    assert "/#token=" in err


def test_slow_headers_many_connections_and_deep_json_are_bounded(tiny_model):
    """A header trickle is cut at the deadline, connections beyond the cap get 503, the page's socket outlives both
    deadlines, and JSON nested too deeply is refused in a reply, never a 500 or a dead socket."""
    import socket

    from asearcher_plugin.demo.server import connection_options

    app = create_app([f"http://127.0.0.1:{free_port()}"], tiny_model, access=Access.for_bind("127.0.0.1", token=TOKEN))
    options = connection_options(header_timeout_s=2, max_connections=4, body_timeout_s=1)
    with serve_app(app, **options) as url:
        port = int(url.rsplit(":", 1)[1])
        with ws(url) as sock:
            held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
            for conn in held:
                conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finished
            over = httpx.get(url + "/api/options", headers=AUTH)
            assert over.status_code == 503, over.text
            # at the deadline (2 s); without one, recv times out at 10 s and the test fails
            assert held[0].recv(200).startswith(b"HTTP/1.1 408"), "a header trickle was not cut off"
            for conn in held:
                conn.close()
            time.sleep(0.5)
            assert httpx.get(url + "/api/options", headers=AUTH).status_code == 200

            sock.send("[" * 100_000 + "]" * 100_000)
            assert "nested" in json.loads(sock.recv(timeout=10))["error"]
            sock.send(json.dumps({"op": "stop", "run": "r0"}))  # the socket outlived both deadlines
            assert "r0 is not running" in json.loads(sock.recv(timeout=10))["error"]
        deep = httpx.post(url + "/api/replay", content="[" * 100_000, headers=AUTH)
        assert deep.status_code == 400 and "nested too deeply" in deep.json()["error"], deep.text
