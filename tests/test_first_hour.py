"""What a newcomer meets first: a dead server, a port in use, a resumed folder, the help; one line each, as a user
runs the commands (real processes, real sockets)."""

import socket

import pytest

from asearcher_plugin.eval.runner import settings_changed
from local_retriever.server_process import free_port
from tests.helpers import run_cli


@pytest.fixture
def taken_port():
    """A port another server listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_kb_query_on_a_dead_server_is_one_line_naming_it_and_how_to_start_one():
    url = f"http://127.0.0.1:{free_port()}"
    out = run_cli("kb", "query", "capital of Angola", "--url", url, timeout=120)
    assert out.returncode == 1
    line = one_line(out.stderr)
    assert line.startswith("error: ") and url in line and "asearcher kb serve runs/sample-kb --port 5005" in line


@pytest.mark.parametrize("command", [["kb", "serve", "."], ["demo"]])
def test_a_port_in_use_is_refused_in_one_line_before_serving(taken_port, command):
    out = run_cli(*command, "--port", str(taken_port), timeout=120)
    assert out.returncode == 2 and "serving" not in out.stderr and "demo:" not in out.stderr
    line = one_line(out.stderr)
    assert f"port {taken_port} on 127.0.0.1 is in use" in line and "--port" in line


def test_help_shows_flags_without_a_type_and_eval_without_a_required_command():
    out = run_cli("eval", "--help", timeout=120)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "--scripted-reference-policy" in text and "<bool>" not in text
    assert "COMMAND [ARGS]" not in text and "eval [OPTIONS] [compare RUN_A RUN_B]" in text
    assert "--dataset <list[str]>" in text  # options that take a value keep their type


def card(port=5005, temperature=0.6, **kb):
    return {
        "kb": {"backend": "local", "top_k": 3, "urls": [f"http://127.0.0.1:{port}"], "manifest_sha256": "a", **kb},
        "model": {"name": "m", "sampling": {"temperature": temperature}},
        "k": 2,
        "datasets": {"files": {"sample": {"questions": 3}}},
        "agent_config": {"tools": {"local": {"urls": [f"http://127.0.0.1:{port}"]}}},
    }


def test_a_resume_compares_what_was_run_not_where_the_servers_were():
    assert settings_changed(None, card()) == []
    assert settings_changed(card(), card(port=6006)) == []  # the same KB on another port
    assert settings_changed(card(), {**card(), "datasets": {"files": {"other": {}}}}) == []  # a dataset added
    # a KB that did not answer has nothing to compare; its top_k is still the run's
    down = card(unreachable="refused")
    del down["kb"]["manifest_sha256"]
    assert settings_changed(card(), down) == []
    assert settings_changed(card(), {**down, "kb": {**down["kb"], "top_k": 5}}) == ["kb.top_k"]
    assert settings_changed(card(), card(temperature=1.0)) == ["model.sampling.temperature"]
    assert settings_changed(card(), {**card(), "k": 4}) == ["k"]
    assert settings_changed(card(), card(manifest_sha256="b")) == ["kb.manifest_sha256"]


def test_bm25s_logs_at_the_level_the_command_asked_for():
    """bm25s sets its own logger to DEBUG on import: a `DEBUG bm25s` line under the default `--log-level warning`."""
    import logging

    import local_retriever.sparse  # noqa: F401 - the import is what is tested

    assert logging.getLogger("bm25s").level == logging.NOTSET  # it follows the root logger's level
