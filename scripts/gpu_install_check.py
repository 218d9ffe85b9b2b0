"""Checks on a machine without a GPU that `scripts/install-gpu.sh`'s last step resolves: in a new virtual
environment where torch 2.13.0 and flash-attn 2.8.3 (the two CUDA builds of its first steps) are stubbed as installed,
pip's resolver report for `.[train]` must keep OpenRLHF's pins, install no second torch or flash-attn, and build from
source only what needs no torch to build. Prints the report's figures; exit 1 if one does not hold.

    python scripts/gpu_install_check.py        # about a minute; reads the package index, installs nothing
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUBS = {"torch": "2.13.0", "flash-attn": "2.8.3"}
EXPECTED = {"openrlhf": "0.11.2", "vllm": "0.29.0", "transformers": "5.15.0", "ray": "2.55.0"}
# sdists whose build needs no torch: DeepSpeed builds without its ops (they compile at first use), the other is
# pure Python
SOURCE_OK = {"deepspeed", "transformers-stream-generator"}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = Path(tmp) / "venv"
        venv.create(env, with_pip=True)
        python = env / "bin" / "python"
        site = subprocess.run(
            [python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for name, version in STUBS.items():
            info = Path(site) / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
            (info / "RECORD").write_text("")
        report = Path(tmp) / "report.json"
        done = subprocess.run(
            [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", report, f"{ROOT}[train]"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            print("FAIL: pip could not resolve .[train]", file=sys.stderr)
            return 1
        install = json.loads(report.read_text())["install"]
    versions = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in install}
    sources = sorted(
        i["metadata"]["name"].lower()
        for i in install
        if "dir_info" not in i["download_info"] and not i["download_info"]["url"].endswith(".whl")
    )
    problems = [f"{n} {versions.get(n)} (expected {v})" for n, v in EXPECTED.items() if versions.get(n) != v]
    problems += [f"{n} would be installed again" for n in STUBS if n in versions]
    problems += [f"{n} would be built from source" for n in sources if n not in SOURCE_OK]
    print(f"| packages to install | {len(install)} |")
    for name in [*EXPECTED, "deepspeed"]:
        print(f"| {name} | {versions.get(name)} |")
    print(f"| built from source | {', '.join(sources) or 'none'} |")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
