"""A rollout engine refuses to start when its node reaches no KB server (multi-node runs pointing at 127.0.0.1)."""

import json
import os
import socket
import subprocess
import sys

from asearcher_plugin.config import LocalToolsConfig
from tests.http_helpers import free_port


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
    from asearcher_plugin.config import AgentConfig
    from asearcher_plugin.env import AgentExecutor

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
