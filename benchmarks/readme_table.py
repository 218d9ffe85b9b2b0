"""Writes a benchmark's results as a markdown table between marker comments, in README.md or the docs page
that holds its block."""

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


def publish(
    name: str, header: list[str], rows: list[list], note: str, payload: dict, script: str | None = None
) -> str:
    """Saves `benchmarks/results/NAME.json` and replaces the block marked `bench:NAME` in README.md and docs/;
    `script` names the benchmark that made it when that is not NAME."""
    table = markdown_table(header, rows)
    command = f"python benchmarks/{script or name}.py"
    body = f"{table}\n\n{note} ({machine()}, {date.today().isoformat()}; `{command}`)"
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / f"{name}.json").write_text(
        json.dumps({**payload, "machine": machine()}, indent=2)
    )
    block = f"<!-- bench:{name} -->\n{body}\n<!-- /bench:{name} -->"
    pattern = re.compile(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", re.S)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
    holders = [p for p in pages if pattern.search(p.read_text())]
    for page in holders or [ROOT / "README.md"]:  # a new block goes to the end of the README
        text = page.read_text()
        page.write_text(pattern.sub(lambda _: block, text) if holders else f"{text}\n{block}\n")
    return table
