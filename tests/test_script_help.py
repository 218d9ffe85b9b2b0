"""Every script in benchmarks/, scripts/ and data_synth/ prints its `--help`: argparse formats each help text with
`%`, so a bare "99%" in one made `--help` a TypeError (copy_skill.py's `--max-length`)."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def is_script(path: Path) -> bool:
    text = path.read_text()
    return "argparse" in text and "__main__" in text


SCRIPTS = sorted(
    p for folder in ("benchmarks", "scripts", "data_synth") for p in (ROOT / folder).rglob("*.py") if is_script(p)
)


class Rendered(Exception):
    pass


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_help_renders(script, monkeypatch):
    def render(parser, *args, **kwargs):
        parser.format_help()  # every argument's help text, with its %-expansion
        raise Rendered

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", render)
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    monkeypatch.syspath_prepend(str(ROOT))
    with pytest.raises(Rendered):
        runpy.run_path(str(script), run_name="__main__")


def test_the_list_holds_the_scripts_users_run():
    names = {p.name for p in SCRIPTS}
    assert {"copy_skill.py", "decision_task.py", "learn_search_decisions.py", "long_sentences.py"} <= names
