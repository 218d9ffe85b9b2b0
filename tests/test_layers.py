"""Dependencies point one way: the import contracts in .importlinter, checked with import-linter (grimp's graph
includes imports made inside functions, which is where a lazy cross-layer import would hide)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--config",
            str(config),
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_packages_keep_their_import_contracts():
    out = lint_imports(ROOT / ".importlinter")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in out.stdout


def lint_planted(tmp_path: Path, path: str, code: str) -> subprocess.CompletedProcess:
    """The contracts over a copy of the packages with one more module, `path` holding `code`."""
    import shutil

    for package in ("local_retriever", "asearcher_plugin", "data_synth"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    (tmp_path / path).write_text(code)
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); sys.argv[1:2] = []; "
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            str(tmp_path),
            "--config",
            str(tmp_path / ".importlinter"),
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )


def test_a_cross_layer_import_breaks_the_contract(tmp_path):
    # the bottom layer reaching up into the agent
    out = lint_planted(
        tmp_path, "local_retriever/upward.py", "def f():\n    from asearcher_plugin.rewards import reward\n"
    )
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "local_retriever is not allowed to import asearcher_plugin" in out.stdout
    assert "local_retriever.upward -> asearcher_plugin.rewards.reward" in out.stdout


def test_openrlhf_imported_outside_its_adapter_breaks_the_contract(tmp_path):
    # the SFT command reaching into OpenRLHF itself, as it once did to swap its dataset in
    out = lint_planted(tmp_path, "asearcher_plugin/sft/swap.py", "def f():\n    import openrlhf.datasets\n")
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "asearcher_plugin is not allowed to import openrlhf" in out.stdout
    assert "asearcher_plugin.sft.swap -> openrlhf" in out.stdout


def test_a_room_importing_upward_breaks_the_house_contract(tmp_path):
    # the helpers reaching up into the settings, as the config once reached into the tool registry
    out = lint_planted(
        tmp_path, "asearcher_plugin/utils/upward.py", "def f():\n    from asearcher_plugin.settings import config\n"
    )
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "asearcher_plugin.utils is not allowed to import asearcher_plugin.settings" in out.stdout
    assert "asearcher_plugin.utils.upward -> asearcher_plugin.settings.config" in out.stdout


def test_a_module_left_loose_at_the_root_breaks_the_house_contract(tmp_path):
    out = lint_planted(tmp_path, "asearcher_plugin/loose.py", "X = 1\n")
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "asearcher_plugin.loose" in out.stdout


def test_the_package_root_holds_the_entry_points_and_a_few_modules():
    modules = sorted(p.name for p in (ROOT / "asearcher_plugin").glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= 8, modules


def test_the_old_names_of_moved_modules_still_import():
    # users' recipes name them (`reward.function: asearcher_plugin.reward:...`), and agent files written before the
    # move import `asearcher_plugin.config`; each old name is the moved module itself, with a deprecation warning
    old_agent_file = (
        "from asearcher_plugin.config import LocalToolsConfig, McpServerConfig, RunConfig, WebToolsConfig\n"
        "from asearcher_plugin.env import AgentExecutor\n"
        "import asearcher_plugin.settings.config as new\n"
        "import asearcher_plugin.config as old\n"
        "assert old is new and RunConfig is new.RunConfig and old.__spec__.name == new.__name__\n"
        "from asearcher_plugin import MOVED\n"
        "from asearcher_plugin.utils.dotted import resolve_reference\n"
        "import importlib\n"
        "for old_name, new_name in MOVED.items():\n"
        "    assert importlib.import_module('asearcher_plugin.' + old_name) is "
        "importlib.import_module('asearcher_plugin.' + new_name)\n"
        "fn = resolve_reference('asearcher_plugin.reward:exact_match', 'reward.function', 'm:f', ValueError)\n"
        "assert fn.__module__ == 'asearcher_plugin.rewards.reward', fn.__module__\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", old_agent_file],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "asearcher_plugin.config moved to asearcher_plugin.settings.config" in out.stderr


def test_each_package_registers_its_own_sub_command():
    out = subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.cli", "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    commands = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("│ ") and len(line.split()) > 2}
    assert {"kb", "synth", "eval", "train"} <= commands, out.stdout
