"""`tools.observation_format: asearcher`: tool output exactly as ASearcher shows it, token for token.

The expected strings are written here from ASearcher's format (its `consume_tool_response` and
`prepare_llm_query`, inclusionAI/ASearcher), not from the plugin's code: a search result is
`"<information>\\n" + "\\n\\n".join("[Doc k](url):\\n" + doc[:5000]) + "\\n</information>"`, a page is
read whole in 25,000-character chunks of its first 250,000, each shown to one call as
`<information>\\n>>>> Page i >>>>\\n\\n{chunk}\\n</information>`, and every block is appended as
`"\\n\\n" + block + "\\n<think>\\n"` with a summary turn ending at `</think>` after it. ASearcher
tokenises each appended piece on its own and concatenates token ids; so do these tests. The real
tiny tokenizer, the real KB server and its pages; only the model's turns are scripted.
"""

import httpx
import pytest

from asearcher_plugin.agent.observations import doc_body, page_blocks, search_block
from asearcher_plugin.agent.prompts import build_prompt, chat_prompt, reasoning_prompt
from asearcher_plugin.env import AgentExecutor
from asearcher_plugin.settings.config import AgentConfig, ConfigError, load_config
from tests.helpers import (
    QUESTION,
    TOOL_STOPS,
    TurnEngine,
    appended,
    asearcher_config,
    asearcher_page_texts,
    asearcher_search_text,
    execute,
    expected_blocks,
    ids,
    search_then_read_script,
)


@pytest.mark.parametrize("for_training", [False, True])
def test_search_and_page_chunks_token_for_token(tokenizer, kb_server, long_page, for_training):
    """Evaluation shows a summarised chunk as its stub from then on, as ASearcher's next call does; a training
    sequence keeps it whole, so every generated token keeps the context it was sampled in."""
    url, page = long_page
    search_text, chunks = expected_blocks(kb_server, url, page)
    assert len(chunks) == min(10, -(-len(page) // 25_000)) >= 2
    turns = search_then_read_script(url, len(chunks))
    engine = TurnEngine(tokenizer, turns)
    result = execute(
        AgentExecutor(asearcher_config(kb_server), for_training=for_training), tokenizer, engine, logprobs=1
    )

    gen = [ids(tokenizer, t) for t in turns]
    prompt = ids(tokenizer, build_prompt("asearcher", QUESTION))
    full = [ids(tokenizer, appended(text)) for text, _ in chunks]
    short = [ids(tokenizer, appended(stub)) for _, stub in chunks]
    seen = short if not for_training else full
    search = ids(tokenizer, appended(search_text))
    expected_calls = [prompt, prompt + gen[0] + search, prompt + gen[0] + search + gen[1]]
    base = expected_calls[-1] + gen[2]
    for i in range(len(chunks)):
        expected_calls.append(base + full[i])
        base = base + seen[i] + gen[3 + i]
    expected_calls.append(base)
    assert engine.calls == expected_calls
    assert engine.stops == [TOOL_STOPS, ["</think>"], TOOL_STOPS] + [["</think>"]] * len(chunks) + [TOOL_STOPS]
    assert result["observation_tokens"] == base + gen[-1]
    assert result["answer"] == "Luanda" and result["reward"] == 1.0

    # Each action range holds exactly the tokens of its turn, and only those carry log-probs.
    tokens, ranges = result["observation_tokens"], result["action_ranges"]
    assert [tokens[a:b] for a, b in ranges] == gen
    inside = {i for a, b in ranges for i in range(a, b)}
    assert [lp for i, lp in enumerate(result["rollout_log_probs"]) if i in inside] == [-0.5] * len(inside)
    assert all(lp == 0.0 for i, lp in enumerate(result["rollout_log_probs"]) if i not in inside)

    # The transcript text is the one the tokens spell: stubs in evaluation, whole chunks in training.
    for text, stub in chunks:
        assert appended(text if for_training else stub) in result["text"]
    assert (chunks[0][0] in result["text"]) is for_training


def test_exact_strings_of_blocks():
    rows = [
        {"url": "https://en.wikipedia.org/wiki/A", "title": "A", "text": "x" * 6000, "contents": '"A"\n' + "x" * 6000},
        {"url": "https://en.wikipedia.org/wiki/B", "title": "B", "text": "b text", "contents": '"B"\nb text'},
    ]
    assert search_block(rows, topk=5).text == asearcher_search_text(rows)
    assert search_block(rows, topk=1).text == asearcher_search_text(rows[:1])
    assert search_block([], topk=5).text == "<information>\nNo search results are found.\n</information>"
    # A web result is "title snippet", as ASearcher's Serper client gives it.
    assert doc_body({"title": "Luanda", "text": "Capital of Angola.", "url": "u"}) == "Luanda Capital of Angola."
    for page in [
        "",
        "   \n",
        None,
        "short page",
        "p" * 25_000,
        "q" * 25_001,
        "".join(chr(97 + i % 26) for i in range(300_000)),
    ]:
        assert [(b.text, b.short) for b in page_blocks(page)] == asearcher_page_texts(page)
    assert len(page_blocks("z" * 300_000)) == 10  # 250,000 characters at most


def test_missing_page_and_turn_without_action(tokenizer, kb_server):
    """A URL the KB lacks gives ASearcher's empty-page text; a turn without an action gets nothing appended."""
    url = "https://en.wikipedia.org/wiki/No_such_article_anywhere_zz"
    turns = ["I am thinking", "\n<access>" + url + "</access>", "Nothing there.</think>", "<answer>Luanda</answer>"]
    engine = TurnEngine(tokenizer, turns)
    result = execute(AgentExecutor(asearcher_config(kb_server), for_training=False), tokenizer, engine)
    gen = [ids(tokenizer, t) for t in turns]
    prompt = ids(tokenizer, build_prompt("asearcher", QUESTION))
    empty = ids(tokenizer, appended("<information>\nNo More Information is Found for this URL.\n</information>"))
    assert engine.calls[1] == prompt + gen[0]
    assert engine.calls[2] == prompt + gen[0] + gen[1] + empty
    assert engine.calls[3] == prompt + gen[0] + gen[1] + empty + gen[2]
    assert result["extra_logs"]["invalid_actions"] == 1.0  # the first turn only: a summary needs no action


def test_rebuilding_agent_sees_a_chunk_whole_once_then_its_stub(tokenizer, kb_server, hybrid_kb):
    """The reasoning agent rebuilds its prompt each call, so it can drop a summarised chunk as ASearcher does."""
    url = next(p["url"] for p in hybrid_kb.pages.sample(50, seed=1, min_chars=2_000) if len(p["contents"]) < 20_000)
    page = httpx.post(f"{kb_server}/access", json={"urls": [url]}).json()["result"][0]["contents"]
    ((full, stub),) = asearcher_page_texts(page)
    turns = ["<access>" + url + "</access>", "Read it.</think>", "<answer>Luanda</answer>"]
    engine = TurnEngine(tokenizer, turns)
    execute(
        AgentExecutor(asearcher_config(kb_server, agent_type="asearcher-reasoning"), for_training=False),
        tokenizer,
        engine,
        max_length=200_000,
    )

    def prompt_ids(history):
        text = reasoning_prompt(QUESTION, history)
        if getattr(tokenizer, "chat_template", None):
            text = chat_prompt(tokenizer, text)
        return ids(tokenizer, text)[-(200_000 - 1) :]

    assert engine.calls[1] == prompt_ids(turns[0] + appended(full))
    assert engine.calls[2] == prompt_ids(turns[0] + appended(stub) + turns[1])
    assert engine.stops == [TOOL_STOPS, ["</think>"], TOOL_STOPS]


def test_config_switch(tmp_path):
    assert AgentConfig().tools.observation_format == "native"
    bad = tmp_path / "agent.yaml"
    bad.write_text("agent:\n  feedback_style: chat\n  tools: {observation_format: asearcher}\n")
    with pytest.raises(ConfigError, match="tools: .*needs feedback_style 'information'"):
        load_config(bad)
    bad.write_text("agent:\n  tools: {observation_format: verbatim}\n")
    with pytest.raises(ConfigError, match="tools.observation_format"):
        load_config(bad)
