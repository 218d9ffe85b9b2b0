"""A rollout engine refuses to start when its node reaches no KB server (multi-node runs pointing at 127.0.0.1)."""

import json
import socket
import subprocess
import sys

from asearcher_plugin.config import LocalToolsConfig
from tests.http_helpers import free_port


def build_as_openrlhf(run_config: dict) -> subprocess.CompletedProcess:
    """What OpenRLHF's rollout actor does: load env.py by path, build AgentExecutor() with no arguments."""
    from asearcher_plugin.env import agent_file

    probe = (
        "import importlib.util, sys; s = importlib.util.spec_from_file_location('agent_module', sys.argv[1]); "
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.AgentExecutor(); print('ready')"
    )
    import os

    env = {**os.environ, "ASEARCHER_RUN_CONFIG": json.dumps(run_config)}
    return subprocess.run(
        [sys.executable, "-c", probe, str(agent_file())], capture_output=True, text=True, env=env, timeout=120
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
    from asearcher_plugin.config import AgentConfig
    from asearcher_plugin.env import AgentExecutor

    dead = f"http://127.0.0.1:{free_port()}"
    off = build_as_openrlhf({"agent": {"tools": {"local": {"urls": [dead], "check_on_start": False}}}})
    assert off.returncode == 0
    # eval and `asearcher rollout` pass their config: tool failures there are counted per item instead
    AgentExecutor(AgentConfig.model_validate({"tools": {"local": {"urls": [dead]}}}))
    assert LocalToolsConfig().check_on_start
