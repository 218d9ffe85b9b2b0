"""The project as a user gets it from pip: a wheel built from a copy of the source, installed into a directory."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_and_install(tmp_path: Path) -> tuple[Path, Path]:
    """(the wheel, the directory it is installed in with `pip install --target`); put the latter on sys.path."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("asearcher_plugin", "local_retriever", "data_synth"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("asearcher_plugin-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return wheel, target
