"""Logs: rate-limited warnings, tool errors at WARNING, `asearcher --log-level`, the KB server's access log."""

import asyncio
import logging

import pytest
from typer.testing import CliRunner

from asearcher_plugin.env import AgentInstance
from asearcher_plugin.settings.config import AgentConfig
from asearcher_plugin.tools import ToolError
from asearcher_plugin.tools.base import ToolBox
from local_retriever.log_throttle import ThrottleFilter, throttled


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def record(msg: str, *args, key=None, name: str = "x") -> logging.LogRecord:
    rec = logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)
    if key is not None:
        rec.throttle_key = key
    return rec


def test_throttle_passes_one_record_per_key_per_interval_and_counts_the_rest():
    clock = Clock()
    f = ThrottleFilter(interval=60, clock=clock)
    assert f.filter(record("search failed: %s", "a"))
    assert not f.filter(record("search failed: %s", "b"))  # same template, other args: same key
    assert not f.filter(record("search failed: %s", "c"))
    assert f.filter(record("access failed: %s", "a"))  # another template is another key
    assert f.filter(record("whatever", key="url-1")) and f.filter(record("whatever", key="url-2"))
    assert not f.filter(record("other text", key="url-1"))
    assert f.suppressed == 3
    clock.now += 60
    rec = record("search failed: %s", "d")
    assert f.filter(rec) and rec.throttle_dropped == 2
    assert rec.getMessage() == "search failed: d (2 more like it since the last one shown)"
    rec = record("access failed: %s", "b")
    assert f.filter(rec) and rec.throttle_dropped == 0 and rec.getMessage() == "access failed: b"


def test_throttle_forgets_the_oldest_keys_beyond_its_bound():
    f = ThrottleFilter(interval=60, clock=Clock(), max_keys=2)
    assert f.filter(record("m", key=1)) and f.filter(record("m", key=2)) and f.filter(record("m", key=3))
    assert f.filter(record("m", key=1))  # forgotten, so it passes again
    assert not f.filter(record("m", key=3))


def test_throttle_refuses_a_negative_interval_and_is_added_once():
    with pytest.raises(ValueError, match="interval"):
        ThrottleFilter(interval=-1)
    logger = throttled("tests.test_logs.once")
    assert throttled("tests.test_logs.once") is logger
    assert sum(isinstance(f, ThrottleFilter) for f in logger.filters) == 1


def down_box(error_type: type) -> ToolBox:
    class DownBox(ToolBox):
        async def _search(self, query, topk):
            raise error_type("connection refused by http://127.0.0.1:9/retrieve")

        async def _access(self, url):
            raise error_type("connection refused")

    return DownBox()


@pytest.mark.parametrize("agent_type", ["search-r1", "asearcher"])
def test_repeated_tool_errors_give_one_warning(agent_type, caplog):
    # An error type of its own per run: the env logger's throttle is process-wide and must not have seen the key.
    error_type = type(f"BackendDown_{agent_type.replace('-', '_')}", (ToolError,), {})
    agent = AgentInstance(AgentConfig(agent_type=agent_type, max_turns=10), down_box(error_type))

    async def three_searches():
        return [await agent.turn(f"<search>q{i}</search>", label="x") for i in range(3)]

    with caplog.at_level(logging.WARNING, logger="asearcher_plugin.agent.instance"):
        results = asyncio.run(three_searches())
    warnings = [
        r for r in caplog.records if r.name == "asearcher_plugin.agent.instance" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert f"search failed: {error_type.__name__}: connection refused" in warnings[0].getMessage()
    assert results[-1].extra_logs["tool_errors"] == 3


def invoke(*args):
    from asearcher_plugin.cli import app

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        result = CliRunner().invoke(app, list(args))
        return result, root.level
    finally:
        root.handlers[:], root.level = handlers, level


@pytest.mark.parametrize("given, level", [("debug", logging.DEBUG), ("ERROR", logging.ERROR)])
def test_log_level_is_accepted(given, level):
    result, root_level = invoke("--log-level", given, "make-tiny-model", "--help")
    assert result.exit_code == 0, result.output
    assert root_level == level


def test_unknown_log_level_is_refused_naming_the_choices():
    result, _ = invoke("--log-level", "loud", "make-tiny-model", "--help")
    assert result.exit_code == 2
    assert "loud" in result.output and "warning" in result.output


@pytest.mark.parametrize("access_log", [False, True])
def test_kb_serve_access_log_is_an_option(access_log):
    """`kb serve --access-log` gives uvicorn's access log, which writes at INFO; off by default."""
    import uvicorn

    from local_retriever.server import log_options

    names = ("uvicorn", "uvicorn.error", "uvicorn.access")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        config = uvicorn.Config(lambda scope, receive, send: None, **log_options("warning", access_log))
        assert config.access_log is access_log
        assert logging.getLogger("uvicorn.access").isEnabledFor(logging.INFO) is access_log
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    assert log_options() == {"log_level": "warning", "access_log": False}
    assert log_options("debug", True)["log_level"] == "debug"
