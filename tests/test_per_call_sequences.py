"""`agent.training_sequences: per_call`: a trajectory as the training sequences ASearcher builds from its calls.

The rule, from ASearcher's training code: a call whose input extends the previous sequence token for token is merged
into it; a changed context (a page chunk replaced by its stub, a rebuilt prompt) starts a new sequence. The expected
sequences here are built from the prompts the scripted engine recorded, not from the plugin's code.
"""

import types

import pytest

from asearcher_plugin.agent.sequences import CallRecords
from asearcher_plugin.env import AgentExecutor
from asearcher_plugin.settings.config import ConfigError
from tests.helpers import TurnEngine, asearcher_config, execute, expected_blocks, ids, search_then_read_script


def out(token_ids, logprob=-0.5):
    from asearcher_plugin.engines.types import Logprob

    return types.SimpleNamespace(token_ids=token_ids, logprobs=[{t: Logprob(logprob)} for t in token_ids])


def test_a_call_extending_the_sequence_is_merged_and_a_changed_context_starts_a_new_one():
    records = CallRecords(want_logprobs=True)
    records.add([1, 2], out([3, 4]), started=10.0, ended=11.0)
    records.add([1, 2, 3, 4, 9, 9], out([5]), started=12.0, ended=13.0)  # tool output 9 9, then the call
    records.add([1, 2, 7], out([8]), started=14.0, ended=15.0)  # the context changed under it
    first, second = records.to_openrlhf()
    assert first["observation_tokens"] == [1, 2, 3, 4, 9, 9, 5]
    assert first["action_ranges"] == [(2, 4), (6, 7)]
    assert first["rollout_log_probs"] == [0, 0, -0.5, -0.5, 0, 0, -0.5]
    assert first["turn_times"] == [10.0, 12.0] and first["token_times"] == [10.0, 13.0]
    assert second["observation_tokens"] == [1, 2, 7, 8] and second["action_ranges"] == [(3, 4)]
    assert second["token_times"] == [14.0, 15.0]


def test_a_shorter_input_is_never_merged():
    records = CallRecords(want_logprobs=False)
    records.add([1, 2, 3], out([4]), 0.0, 1.0)
    records.add([1, 2], out([5]), 2.0, 3.0)  # a prefix of the sequence, not an extension of it
    assert [s["observation_tokens"] for s in records.to_openrlhf()] == [[1, 2, 3, 4], [1, 2, 5]]
    assert records.to_openrlhf()[0]["rollout_log_probs"] is None


def check_sequences(result, engine, turns, tokenizer):
    """Every call appears once, in order, as an action span whose prefix is exactly the prompt the call got."""
    gen = [ids(tokenizer, t) for t in turns]
    spans = [(s, a, b) for s in result["sequences"] for a, b in s["action_ranges"]]
    assert len(spans) == len(engine.calls) == len(turns)
    for (seq, a, b), prompt, generated in zip(spans, engine.calls, gen):
        assert seq["observation_tokens"][:a] == prompt
        assert seq["observation_tokens"][a:b] == generated
        inside = [seq["rollout_log_probs"][i] for i in range(a, b)]
        assert inside == [-0.5] * len(generated)
    for seq in result["sequences"]:
        inside = {i for a, b in seq["action_ranges"] for i in range(a, b)}
        assert all(lp == 0.0 for i, lp in enumerate(seq["rollout_log_probs"]) if i not in inside)
        assert len(seq["turn_times"]) == len(seq["action_ranges"])


def test_asearcher_stubs_train_as_a_new_sequence_after_each_summarised_chunk(tokenizer, kb_server, long_page):
    url, page = long_page
    _, chunks = expected_blocks(kb_server, url, page)
    turns = search_then_read_script(url, len(chunks))
    engine = TurnEngine(tokenizer, turns)
    executor = AgentExecutor(asearcher_config(kb_server, training_sequences="per_call"), for_training=True)
    result = execute(executor, tokenizer, engine, logprobs=1)
    check_sequences(result, engine, turns, tokenizer)
    # Calls 0-3 share one context (search, summary, open the page, read chunk 1); each later call sees the chunk
    # before it as its stub, so its context changed: one more sequence per chunk.
    assert len(result["sequences"]) == 1 + len(chunks)
    assert [len(s["action_ranges"]) for s in result["sequences"]] == [4] + [1] * len(chunks)
    assert result["answer"] == "Luanda" and result["reward"] == 1.0
    # ASearcher's stub is what the calls after a chunk saw: the training sequences hold no chunk twice whole.
    whole = ids(tokenizer, chunks[0][0])[:50]
    holding = [s for s in result["sequences"] if _contains(s["observation_tokens"], whole)]
    assert len(holding) == 1


def test_the_reasoning_agent_trains_one_sequence_per_rebuilt_prompt(tokenizer, kb_server):
    turns = ["<search>Angola capital</search>", "Found it.</think>", "<answer>Luanda</answer>"]
    engine = TurnEngine(tokenizer, turns)
    cfg = asearcher_config(kb_server, agent_type="asearcher-reasoning", training_sequences="per_call")
    result = execute(AgentExecutor(cfg, for_training=True), tokenizer, engine, max_length=200_000, logprobs=1)
    check_sequences(result, engine, turns, tokenizer)
    assert result["answer"] == "Luanda" and result["reward"] == 1.0
    assert result["observation_tokens"] is None  # no single sequence: only the per-call ones train


def test_the_reasoning_agent_without_per_call_is_refused_for_training(kb_server):
    with pytest.raises(ConfigError, match="training_sequences: per_call"):
        AgentExecutor(asearcher_config(kb_server, agent_type="asearcher-reasoning"), for_training=True)


def test_per_call_under_openrlhfs_own_generator_is_refused(kb_server):
    with pytest.raises(ConfigError, match="streaming scheduler"):
        AgentExecutor(asearcher_config(kb_server, training_sequences="per_call"), without_launcher=True)


def _contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def test_a_128_turn_reasoning_trajectory_runs_to_its_end_with_every_call_in_budget(tokenizer, kb_server):
    """127 searches and an answer: ~3,000k characters of search results in all, but each call sees the question and
    the last 25,000 characters of history, so every call fits 16k tokens and nothing is truncated. One growing
    sequence of the same turns is cut at the same budget after a few turns."""
    turns = ["<search>Angola capital</search>"] * 127 + ["<answer>Luanda</answer>"]
    budget = 16_000
    cfg = asearcher_config(kb_server, agent_type="asearcher-reasoning", training_sequences="per_call", max_turns=128)
    engine = TurnEngine(tokenizer, turns)
    result = execute(AgentExecutor(cfg, for_training=True), tokenizer, engine, max_length=budget, logprobs=1)
    assert not result["truncated"] and result["extra_logs"]["turns"] == 128 and result["answer"] == "Luanda"
    check_sequences(result, engine, turns, tokenizer)
    assert all(len(s["observation_tokens"]) <= budget for s in result["sequences"])
    assert sum(len(s["observation_tokens"]) for s in result["sequences"]) > 10 * budget  # far beyond one sequence

    single = asearcher_config(kb_server, max_turns=128)  # the asearcher agent, one growing sequence
    engine = TurnEngine(tokenizer, turns)
    result = execute(AgentExecutor(single, for_training=True), tokenizer, engine, max_length=budget, logprobs=1)
    assert result["truncated"] and result["extra_logs"]["turns"] < 20


def test_a_per_call_response_carries_its_sequences_and_not_the_whole_trajectory_again(tokenizer, kb_server):
    """What travels through Ray's queue: the sequences hold the tokens, spans, log-probs and times the trainer reads;
    the whole trajectory's copies of them (and its text) are left out, so the response is barely larger than its
    sequences (with them, 8 merged turns would more than double it)."""
    from ray._private.worker import global_worker

    turns = ["<search>Angola capital</search>"] * 7 + ["<answer>Luanda</answer>"]
    cfg = asearcher_config(kb_server, training_sequences="per_call", max_turns=8)
    engine = TurnEngine(tokenizer, turns)
    result = execute(AgentExecutor(cfg, for_training=True), tokenizer, engine, logprobs=1)
    check_sequences(result, engine, turns, tokenizer)
    whole = ("observation_tokens", "action_ranges", "rollout_log_probs", "text", "token_times", "turn_times")
    assert {k: result[k] for k in whole} == dict.fromkeys(whole)  # the keys stay: every response has the same
    assert result["answer"] == "Luanda" and result["extra_logs"]["turns"] == 8

    def ray_bytes(obj) -> int:  # Ray's own serialiser, as the response crosses from the engine actor
        return global_worker.get_serialization_context().serialize(obj).total_bytes

    assert ray_bytes(result) < 1.1 * ray_bytes(result["sequences"])
