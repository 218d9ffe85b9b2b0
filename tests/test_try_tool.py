"""`asearcher tool SPEC --call JSON`: a tools.extra function shown and called as the agent offers and calls it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from asearcher_plugin.cli import app

MODULE = "tests.tool_examples"  # the tools the agent's tests offer; docs/tools.md's calculator among them


def invoke(*args):
    return CliRunner().invoke(app, ["tool", *args])


def test_the_schema_and_a_call_as_the_model_sees_them():
    shown = invoke(f"{MODULE}:calculator", "--call", '{"expression": "6 * 7"}')
    assert shown.exit_code == 0, shown.output
    schema = json.loads(shown.output[: shown.output.index("call: ")])
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["properties"] == {"expression": {"type": "string"}}
    assert shown.output.rstrip().endswith("the model is told:\n42")
    dict_result = invoke(f"{MODULE}:unit_price", "--call", '{"total": 9, "count": 3}')
    assert dict_result.output.rstrip().endswith('{"unit": 3.0}')  # not text: shown as JSON


@pytest.mark.parametrize(
    "name,arguments,told",
    [
        ("calculator", '{"expr": "1"}', "Error: calculator has no argument 'expr'; its arguments: expression"),
        ("calculator", '{"expression": 12}', "Error: argument 'expression' of calculator must be string, got 12"),
        ("calculator", '{"expression": "1 / 0"}', "calculator failed: ZeroDivisionError (counted as a tool error)"),
        (
            "rates",
            "{}",
            "rates failed: the rates service answered 503 (counted as a tool error of the infrastructure's)",
        ),
    ],
)
def test_a_bad_call_shows_what_the_model_is_told(name, arguments, told):
    result = invoke(f"{MODULE}:{name}", "--call", arguments)
    assert result.exit_code == 1
    assert f"the model is told: {told}" in result.output


def test_a_call_past_its_deadline_is_the_infrastructures():
    result = invoke(f"{MODULE}:slow", "--call", "{}", "--deadline", "0.2")
    assert result.exit_code == 1 and "slow failed: TimeoutError" in result.output
    assert "of the infrastructure's" in result.output


def test_bad_input_is_named_before_anything_runs():
    not_json = invoke(f"{MODULE}:calculator", "--call", "{expression")
    assert not_json.exit_code == 2 and "error: --call is not JSON" in not_json.output
    assert '"function"' not in not_json.output
    missing = invoke(f"{MODULE}:nothing")
    assert missing.exit_code == 2 and f"module '{MODULE}' has no attribute 'nothing'" in missing.output


def test_the_console_script_imports_from_the_current_folder_only_with_pythonpath(tmp_path):
    """As `asearcher train` and Ray's workers: the folder a command runs in is not on Python's path."""
    (tmp_path / "my_tools.py").write_text((Path(__file__).parent / "tool_examples.py").read_text())
    script = Path(sys.executable).with_name("asearcher")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(script), "tool", "my_tools:calculator", "--call", '{"expression": "2 + 3"}']
    without = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert without.returncode == 2
    assert "cannot import module 'my_tools'" in without.stderr and "PYTHONPATH=. asearcher" in without.stderr
    with_path = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, env={**env, "PYTHONPATH": "."}, timeout=120
    )
    assert with_path.returncode == 0, with_path.stderr
    assert with_path.stdout.rstrip().endswith("the model is told:\n5")
