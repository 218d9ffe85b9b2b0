"""A row whose question is null must never become the question "None".

Eval datasets refuse the row, naming file and line; in training, where OpenRLHF hands the
environment whatever the prompt file held, a null prompt is a trajectory with zero reward.
"""

import asyncio
import json

import pytest

from asearcher_plugin.commands.rollout import load_prompts
from asearcher_plugin.engines.types import SamplingParams
from asearcher_plugin.env import AgentExecutor
from asearcher_plugin.eval.datasets import DatasetError, load_dataset
from asearcher_plugin.settings.config import AgentConfig
from tests.helpers import ScriptedEngine


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    "row, problem",
    [
        ({"id": "b", "question": None, "golden_answers": ["x"]}, "'question' is null"),
        ({"id": "b", "question": "  ", "golden_answers": ["x"]}, "'question' is empty"),
        ({"id": "b", "question": ["who?"], "golden_answers": ["x"]}, "'question' must be a string, got list"),
        ({"id": "b", "question": "who?", "golden_answers": ["x", None]}, "'golden_answers' holds a null"),
    ],
)
def test_eval_rows_with_a_null_question_or_answer_are_refused(tmp_path, row, problem):
    path = _jsonl(tmp_path / "nq.jsonl", [{"id": "a", "question": "who?", "golden_answers": ["y"]}, row])
    with pytest.raises(DatasetError) as err:
        load_dataset(str(path))
    assert str(err.value).startswith(f"{path}:2: {problem}")


def test_training_prompt_files_refuse_a_null_question(tmp_path):
    path = _jsonl(tmp_path / "train.jsonl", [{"input": "who?", "label": "y"}, {"input": None, "label": "y"}])
    with pytest.raises(ValueError, match=rf"^{path}:2: 'input' is null"):
        load_prompts(path, "input", "label")


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


@pytest.mark.parametrize("prompt", [None, "", "   "])
def test_a_null_training_prompt_scores_zero_and_is_never_the_question_none(tokenizer, prompt):
    engine = ScriptedEngine(tokenizer, [("<answer>George Orwell</answer>", "stop")])
    config = AgentConfig(agent_type="asearcher", max_turns=2, max_new_tokens_per_turn=32)
    result = asyncio.run(
        AgentExecutor(config).execute(prompt, "George Orwell", SamplingParams(logprobs=1), 1024, tokenizer, engine)
    )
    assert result["reward"] == 0.0  # even though the answer matches the label
    shown = tokenizer.decode(engine.calls[0])
    assert "None" not in shown and "no question" in shown
