"""`asearcher rollout` on real Ray: CPU engine actors, the streaming scheduler, the real KB server."""

import json
import subprocess
import sys

import pytest
import yaml

from asearcher_plugin.recipe import resolve_recipe

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_rollout_command_streams_trajectories(tmp_path, tiny_model, kb_server):
    recipe = yaml.safe_load(resolve_recipe("cpu_tiny").read_text())
    recipe["agent"]["tools"]["local"]["urls"] = [kb_server]
    recipe["agent"]["max_turns"] = 2
    recipe["agent"]["max_new_tokens_per_turn"] = 16
    recipe["openrlhf"]["actor.model_name_or_path"] = str(tiny_model)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"question": f"Question {i}?", "golden_answers": ["x"]}) + "\n" for i in range(12))
    )
    recipe["openrlhf"]["data.prompt_dataset"] = str(prompts)
    recipe["openrlhf"]["rollout.batch_size"] = 2
    recipe["scheduler"] = {"max_staleness": 1, "on_stale": "restart"}  # the mode that bounds consumed staleness
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    out = tmp_path / "rollout" / "trajectories.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "asearcher_plugin.cli",
            "rollout",
            str(tmp_path / "r.yaml"),
            "--out",
            str(out.parent),
            "--engines",
            "2",
            "--steps",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 * 2 * 2  # steps x groups x samples
    assert {r["step"] for r in rows} == {0, 1, 2}
    assert all(r["consumed_version"] - r["admitted_version"] <= 1 for r in rows)  # eta = 1
    # each trajectory dates its first and last token: never before its group's admission, never after use
    assert all(
        r["admitted_version"] <= r["first_token_version"] <= r["last_token_version"] <= r["consumed_version"]
        for r in rows
    )
    assert all(1 <= r["logs"]["turns"] <= 2 and r["tokens"] > 0 for r in rows)
    stats = json.loads(proc.stdout.strip().splitlines()[-2])
    assert stats["trajectories"] == 12 and stats["failed"] == 0
