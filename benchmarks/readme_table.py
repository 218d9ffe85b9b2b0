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
    return f"{psutil.cpu_count(logical=True)} cores, {memory:.0f} GiB, {platform.machine()}, {cpu_kind()}"


def cpu_kind() -> str:
    """The CPU's model name and whether it has AVX-512: the same cores run our CPU benchmarks about twice as fast
    with it (the suite: 2,514 against 4,978 s), so a figure names the kind it ran on."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    return f"{model}, {'AVX-512' if ' avx512f' in info else 'no AVX-512'}"


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
