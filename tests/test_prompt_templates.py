"""Prompts come from template files: the packaged ones render what the built-in prompts always did,
and `agent.prompt_template` loads a user's own, checked for unknown fields when the config loads."""

import asyncio
import subprocess
import sys
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from asearcher_plugin.agent.prompts import build_prompt, reasoning_prompt
from asearcher_plugin.env import AgentInstance
from asearcher_plugin.settings.config import AgentConfig, ConfigError, load_config
from tests.helpers import build_and_install

# The prompts as prompts.py held them before they moved to template files (commit 472c082), verbatim.
OLD_SEARCH_R1 = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>. Question: {question}\n"
)
OLD_ASEARCHER = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant answers it. "
    "The Assistant thinks inside <think> </think>, then takes exactly one action per turn: "
    "<search> query </search> to search the knowledge base, <access> url </access> to read a page "
    "(access the same url again to read its next part), or <answer> short answer </answer> to finish. "
    "Results appear between <information> and </information>. Note: the question is a valid question and you "
    "should try to find a correct answer.\n\nUser: {question}\n\nAssistant: \n<think>"
)
OLD_REASONING = (
    "You are a research agent answering a question with a search engine and a web browser.\n"
    "Question: {question}\n\nReasoning history (most recent last):\n{history}\n\n"
    "Think inside <think> </think>, then take exactly one action: <search> query </search>, "
    "<access> url </access>, or <answer> short answer </answer> once you are confident."
)
QUESTIONS = ["Who wrote Animal Farm?", "  capital of angola  ", "Wie heißt {x}?\nline2", "", "{question}"]
TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "asearcher_plugin" / "agent" / "templates"


@pytest.mark.parametrize("question", QUESTIONS)
def test_default_templates_render_the_old_prompts_byte_for_byte(question):
    q = question.strip()
    assert build_prompt("search-r1", question) == OLD_SEARCH_R1.format(question=q if q.endswith("?") else q + "?")
    assert build_prompt("asearcher", question) == OLD_ASEARCHER.format(question=q)
    assert build_prompt("asearcher-reasoning", question) == OLD_REASONING.format(question=q, history="(none yet)")
    for history in ["abc", "x" * 30_000 + "tail"]:
        assert reasoning_prompt(question, history) == OLD_REASONING.format(question=q, history=history[-25_000:])


def test_template_files_are_the_old_text():
    for name, old in [
        ("search-r1", OLD_SEARCH_R1),
        ("asearcher", OLD_ASEARCHER),
        ("asearcher-reasoning", OLD_REASONING),
    ]:
        assert (TEMPLATE_DIR / f"{name}.txt").read_bytes() == old.encode("utf-8")


def write(tmp_path, text: str, agent_type: str = "asearcher") -> Path:
    template = tmp_path / "my_prompt.txt"
    template.write_text(text, encoding="utf-8")
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"agent:\n  agent_type: {agent_type}\n  prompt_template: {template}\n")
    return cfg


def test_user_template_is_used_byte_for_byte(tmp_path):
    text = "User: {question}\nToday is {current_date}. Use {{braces}} freely.\n\nAssistant: \n<think>\n"
    cfg = load_config(write(tmp_path, text))
    before = datetime.now().strftime("%Y.%m.%d")
    observation = asyncio.run(AgentInstance(cfg).reset({"observation": "  Where is Luanda? ", "label": None}))[
        "observation"
    ]
    after = datetime.now().strftime("%Y.%m.%d")
    assert observation in {
        text.replace("{question}", "Where is Luanda?").replace("{current_date}", day).replace("{{braces}}", "{braces}")
        for day in (before, after)
    }


def test_reasoning_template_gets_the_history(tmp_path):
    cfg = load_config(write(tmp_path, "Q: {question}\nH: {history}\n", "asearcher-reasoning"))
    from asearcher_plugin.agent.prompts import template_for

    template = template_for(cfg.agent_type, cfg.prompt_template)
    assert reasoning_prompt("Q?", "searched once", template) == "Q: Q?\nH: searched once\n"


@pytest.mark.parametrize(
    "text, agent_type, problem",
    [
        ("{question} {history}", "asearcher", r"unknown field\(s\) \{history\} for agent_type 'asearcher'"),
        ("{question} {context}", "asearcher-reasoning", r"unknown field\(s\) \{context\}"),
        ("{question.upper}", "search-r1", r"unknown field\(s\) \{question.upper\}"),
        ("{} {question}", "asearcher", r"unknown field\(s\) \{\}"),
        ("Answer this.", "asearcher", r"must use \{question\}"),
        ("{question} {", "asearcher", r"literal brace"),
    ],
)
def test_bad_template_fails_at_load_naming_field_and_file(tmp_path, text, agent_type, problem):
    with pytest.raises(ConfigError, match=problem) as err:
        load_config(write(tmp_path, text, agent_type))
    assert "my_prompt.txt" in str(err.value) and "prompt_template" in str(err.value)


def test_missing_template_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="nowhere.txt: cannot be read"):
        AgentConfig.model_validate({"prompt_template": str(tmp_path / "nowhere.txt")})


def test_pip_install_ships_the_templates(tmp_path):
    """A wheel built from the project holds the template files, and the installed package renders from them."""
    wheel, target = build_and_install(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("search-r1", "asearcher", "asearcher-reasoning", "tool-calls"):
        assert f"asearcher_plugin/agent/templates/{name}.txt" in names
    for fmt in ("verdict", "asearcher"):  # the judge's templates ride in the same wheel
        assert f"asearcher_plugin/rewards/judge_templates/{fmt}.txt" in names
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import asearcher_plugin.agent.prompts as p; "
        "assert p.__file__.startswith(sys.argv[1]), p.__file__; print(p.build_prompt('asearcher', 'Q?'), end='')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(target)], check=True, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.stdout == OLD_ASEARCHER.format(question="Q?")


def test_a_packaged_prompt_is_named_and_read_from_each_install():
    """`prompt_template: asearcher-search-only` stays a name in the config (a Ray worker on another node reads its
    own installed copy, not the driver's path) and renders ASearcher's training prompt; an unknown name is refused."""
    from asearcher_plugin.agent.prompts import template_for
    from asearcher_plugin.settings.config import AgentConfig

    config = AgentConfig(agent_type="asearcher", prompt_template="asearcher-search-only")
    assert config.prompt_template == "asearcher-search-only"
    text = template_for(config.agent_type, config.prompt_template)
    assert text.startswith("A conversation between User and Assistant.") and "{question}. \n\n" in text
    with pytest.raises(ValueError, match="no-such-prompt"):
        AgentConfig(agent_type="asearcher", prompt_template="no-such-prompt")
