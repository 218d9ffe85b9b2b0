"""Writes a benchmark's results as a markdown table into README.md between marker comments."""

from __future__ import annotations

import json
import platform
import re
from datetime import date
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    memory = psutil.virtual_memory().total / 2**30
    return f"{psutil.cpu_count(logical=True)} cores, {memory:.0f} GiB, {platform.machine()}"


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def publish(name: str, header: list[str], rows: list[list], note: str, payload: dict) -> str:
    """Saves `benchmarks/results/NAME.json` and replaces the README block marked `bench:NAME`."""
    table = markdown_table(header, rows)
    body = f"{table}\n\n{note} ({machine()}, {date.today().isoformat()}; `python benchmarks/{name}.py`)"
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / f"{name}.json").write_text(
        json.dumps({**payload, "machine": machine()}, indent=2)
    )
    readme = ROOT / "README.md"
    text = readme.read_text()
    block = f"<!-- bench:{name} -->\n{body}\n<!-- /bench:{name} -->"
    pattern = re.compile(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text += f"\n{block}\n"
    readme.write_text(text)
    return table
