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
    assert "Contracts: 4 kept, 0 broken." in out.stdout


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
    out = lint_planted(tmp_path, "local_retriever/upward.py", "def f():\n    from asearcher_plugin import reward\n")
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "local_retriever is not allowed to import asearcher_plugin" in out.stdout
    assert "local_retriever.upward -> asearcher_plugin.reward" in out.stdout


def test_openrlhf_imported_outside_its_adapter_breaks_the_contract(tmp_path):
    # the SFT command reaching into OpenRLHF itself, as it once did to swap its dataset in
    out = lint_planted(tmp_path, "asearcher_plugin/sft/swap.py", "def f():\n    import openrlhf.datasets\n")
    assert out.returncode == 1, out.stdout[-4000:] + out.stderr[-2000:]
    assert "asearcher_plugin is not allowed to import openrlhf" in out.stdout
    assert "asearcher_plugin.sft.swap -> openrlhf" in out.stdout


def test_each_package_registers_its_own_sub_command():
    out = subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.cli", "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    commands = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("│ ") and len(line.split()) > 2}
    assert {"kb", "synth", "eval", "train"} <= commands, out.stdout
