"""`python -m asearcher_plugin.launch`: where the run config comes from, and what it refuses."""

import json
import subprocess
import sys

import pytest

from asearcher_plugin.launch import LaunchError, config_for_launch, ray_job_command, runtime_env_vars
from asearcher_plugin.settings.config import RUN_CONFIG_ENV, RunConfig, load_config


def launch(*args, env=None):
    import os

    clean = {k: v for k, v in os.environ.items() if k not in (RUN_CONFIG_ENV, "ASEARCHER_CONFIG")}
    return subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.launch", *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=120,
    )


def test_no_config_is_refused_not_defaulted():
    proc = launch("--train.async_enable")
    assert proc.returncode != 0 and "no agent config" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_config_names_the_field(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_text("agent: {max_turns: 0}\nscheduler: {on_stale: drop}\n")
    proc = launch("--config", str(bad))
    assert proc.returncode != 0 and "max_turns" in proc.stderr and "on_stale" in proc.stderr
    bad.write_text("agents: {}\n")
    assert "unknown section" in launch("--config", str(bad)).stderr


def test_config_sources_in_order(tmp_path, monkeypatch):
    monkeypatch.delenv(RUN_CONFIG_ENV, raising=False)
    monkeypatch.delenv("ASEARCHER_CONFIG", raising=False)
    run = tmp_path / "run.yaml"
    run.write_text("agent: {max_turns: 7}\nscheduler: {max_staleness: 3}\n")
    assert config_for_launch(str(run)).scheduler.max_staleness == 3
    shipped = RunConfig.model_validate({"agent": {"max_turns": 9}})
    monkeypatch.setenv(RUN_CONFIG_ENV, shipped.model_dump_json())  # what a `ray job submit` carries
    assert config_for_launch(None).agent.max_turns == 9
    assert load_config().max_turns == 9  # and what every rollout actor reads
    monkeypatch.setenv(RUN_CONFIG_ENV, "{not json")
    with pytest.raises(LaunchError, match=RUN_CONFIG_ENV):
        config_for_launch(None)


def test_the_job_carries_the_config_and_runs_the_launcher():
    config = RunConfig.model_validate({"agent": {"max_turns": 5}, "scheduler": {"on_stale": "restart"}})
    cmd = ray_job_command(["--train.async_enable"], config)
    assert "-- python -m asearcher_plugin.launch --train.async_enable" in cmd
    assert json.loads(runtime_env_vars(config)[RUN_CONFIG_ENV])["scheduler"]["on_stale"] == "restart"


def test_flags_openrlhf_refuses_are_one_line_naming_the_flag(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("agent: {max_turns: 3}\n")
    proc = launch("--config", str(run), "--rollout.batchsize", "4")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "error: --rollout.batchsize: not a flag of OpenRLHF 0.11.2" in proc.stderr


def test_a_packaged_recipe_serves_as_the_run_config():
    from asearcher_plugin.recipe import resolve_recipe

    config = config_for_launch(str(resolve_recipe("cpu_tiny")))  # its openrlhf flags are the launcher's argv instead
    assert config.agent.max_turns == 4 and config.scheduler.max_staleness == 2


def test_a_fatal_rollout_error_is_found_inside_rays_wrapping():
    ray = pytest.importorskip("ray")
    from asearcher_plugin.launch import rollout_failure
    from asearcher_plugin.scheduler.errors import OutageBudgetExceeded

    reason = OutageBudgetExceeded("tool endpoints unavailable for 7 s")
    wrapped = ray.exceptions.RayTaskError("fit", "a long traceback", reason).as_instanceof_cause()
    assert rollout_failure(wrapped) is reason
    try:  # as the driver meets it: raised again while handling another error
        try:
            raise wrapped
        except Exception as exc:
            raise RuntimeError("train() failed") from exc
    except RuntimeError as outer:
        assert rollout_failure(outer) is reason
    assert rollout_failure(ValueError("a bug of ours")) is None
