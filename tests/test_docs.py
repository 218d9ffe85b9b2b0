"""The documents' own invariants that the strict site build (scripts/test.sh) does not see: README.md is not part
of the site, and benchmarks/readme_table.py rewrites a table wherever its block is found."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def bench_tables() -> list[str]:
    """Each table a benchmark publishes, by the name its block carries (`publish("NAME", ...)`)."""
    return sorted(
        {
            name
            for p in (ROOT / "benchmarks").glob("*.py")
            for name in re.findall(r'publish\(\s*"(\w+)"', p.read_text())
        }
    )


def test_every_benchmark_table_lives_in_exactly_one_page():
    assert len(bench_tables()) >= 10, bench_tables()
    assert "streaming_speedup_length" in bench_tables()  # a second table of one script is found too
    for name in bench_tables():
        holders = [
            page.relative_to(ROOT).as_posix()
            for page in PAGES
            for _ in re.finditer(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", page.read_text(), re.S)
        ]
        # none: the next run would append the table to the end of the README; two: both copies would be rewritten
        assert len(holders) == 1, f"bench:{name} block found in {holders or 'no page'}"


def test_readme_links_point_to_files_in_the_checkout():
    readme = (ROOT / "README.md").read_text()
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)", readme) if "://" not in t]
    assert "docs/kb.md" in targets and "ARCHITECTURE.md" in targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_site_draws_its_diagrams_without_a_network():
    """Material fetches Mermaid from a CDN unless the page defines it: the site ships it (mkdocs.yml)."""
    import yaml

    config = yaml.safe_load(
        "\n".join(line for line in (ROOT / "mkdocs.yml").read_text().splitlines() if "!!python" not in line)
    )
    shipped = [ROOT / "docs" / path for path in config.get("extra_javascript", []) if "mermaid" in path]
    assert shipped and all(p.is_file() for p in shipped), shipped
    assert b"mermaid" in shipped[0].read_bytes()[:5000] or b"mermaid" in shipped[0].read_bytes()[-5000:]
    assert any("mermaid" in page.read_text() for page in PAGES)  # there are diagrams to draw


def test_the_readme_headline_table_is_short_and_leads_with_its_figures():
    """At most 8 rows, each under 200 characters, the figure first and what it is measured against beside it."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Headline figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header, body = rows[0], rows[2:]
    assert header.startswith("| figure |"), header
    assert 1 <= len(body) <= 8, len(body)
    for row in body:
        assert len(row) < 200, f"{len(row)} characters: {row}"
        assert re.match(r"\| [+-]?\d", row), f"the figure does not come first: {row}"
        assert " vs " in row or " under " in row, f"no comparison named: {row}"


def _sentence_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("long_sentences", ROOT / "scripts" / "long_sentences.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_few_sentences_run_over_40_words():
    """At most 5% of a page's sentences over 40 words (scripts/long_sentences.py); a failure names the page and
    its longest sentences."""
    script = _sentence_script()
    for page in script.pages():
        name = page.relative_to(ROOT).as_posix()
        total, long = script.long_ones(page.read_text())
        worst = sorted(long, key=lambda s: -len(s.split()))[:3]
        assert len(long) <= script.LIMIT * total, f"{name}: {len(long)} of {total} sentences over 40 words: {worst}"


def test_the_sentence_counter_splits_prose_and_leaves_code_and_tables_out():
    script = _sentence_script()
    text = "\n".join(
        [
            "# A heading that is not counted",
            "First one, e.g. with 0.5 in it. **Bold lead.** Then `code` starts one.",
            "- an item",
            "- another item. Two sentences",
            "",
            "| a table row. Not counted |",
            "```bash",
            "echo code. Not counted",
            "```",
            "<!-- a comment. Not counted -->",
        ]
    )
    assert script.sentences(text) == [
        "First one, e.g. with 0.5 in it.",
        "**Bold lead.**",
        "Then `code` starts one.",
        "an item",
        "another item.",
        "Two sentences",
    ]
    long = " ".join(["word"] * 41) + "."
    assert script.long_ones(f"{long} Short one.") == (2, [long])


def benchmark_sections(text: str) -> list[tuple[str, str]]:
    """(heading, what stands between it and its table) for each section or subsection that holds a table."""
    out = []
    for part in re.split(r"^#{2,3} ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        before, marker, _ = body.partition("<!-- bench:")
        if marker:
            out.append((title, before))
    return out


def test_every_benchmark_section_opens_with_its_claim_then_its_table():
    """docs/benchmarks.md: a section's claim, in one to three sentences, then its table; the method comes after."""
    script = _sentence_script()
    sections = benchmark_sections((ROOT / "docs" / "benchmarks.md").read_text())
    assert len(sections) >= 15
    for title, before in sections:
        n = len(script.sentences(before))
        assert 1 <= n <= 3, f"benchmarks.md, {title}: {n} sentences before its table (a claim of 1-3 sentences)"


def test_the_claim_check_reads_a_section_as_a_reader_would():
    page = "\n".join(
        [
            "## A (`a.py`)",
            "",
            "Claim one. Claim two.",
            "",
            "<!-- bench:a -->",
            "| x |",
            "<!-- /bench:a -->",
            "### B",
            "",
            "Method first. Then more. And more. Then the claim.",
            "<!-- bench:b -->",
            "## C, no table",
            "Text.",
        ]
    )
    script = _sentence_script()
    found = {title: len(script.sentences(before)) for title, before in benchmark_sections(page)}
    assert found == {"A (`a.py`)": 2, "B": 4}
