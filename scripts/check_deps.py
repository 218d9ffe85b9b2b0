"""Checks the imports of the three packages against setup.py with deptry.

deptry reads no setup.py, so its two lists are handed over as requirements files:
install_requires as the dependencies and every extra as development dependencies. An import
that setup.py does not declare fails (DEP001), and so does one declared only in an extra
(DEP004), unless pyproject.toml's [tool.deptry] lists it with its reason.
Usage: python scripts/check_deps.py [extra deptry options]
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["asearcher_plugin", "local_retriever", "data_synth"]


def setup_kwargs() -> dict:
    """setup.py's keyword arguments, read by running it against a stand-in for setuptools."""
    captured: dict = {}
    stand_in = types.SimpleNamespace(setup=lambda **kwargs: captured.update(kwargs), find_packages=lambda **_: [])
    real = sys.modules.get("setuptools")
    sys.modules["setuptools"] = stand_in
    try:
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        if real is None:
            del sys.modules["setuptools"]
        else:
            sys.modules["setuptools"] = real
    return captured


def main(argv: list[str]) -> int:
    kwargs = setup_kwargs()
    extras = [req for reqs in kwargs.get("extras_require", {}).values() for req in reqs]
    with tempfile.TemporaryDirectory() as tmp:
        base, dev = Path(tmp) / "install_requires.txt", Path(tmp) / "extras.txt"
        base.write_text("\n".join(kwargs["install_requires"]) + "\n")
        dev.write_text("\n".join(extras) + "\n")
        cmd = [
            sys.executable,
            "-m",
            "deptry",
            *PACKAGES,
            "--config",
            "pyproject.toml",
            "--requirements-files",
            str(base),
            "--requirements-files-dev",
            str(dev),
            "--no-ansi",
            *argv,
        ]
        return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
