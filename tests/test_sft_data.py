"""`asearcher sft-data`: the dataset trains on exactly the tokens the engine generated, as the engine saw them.

A teacher (the scripted reference policy, a real HF tokenizer) answers through the real eval runner and agent, with
its searches answered by a knowledge-base server on loopback; every model call it receives and every token it
returns is recorded, and the rows `sft-data` writes are checked against that record, then against what OpenRLHF's
SFT trainer reads of them through `TokenSFTDataset`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import FastAPI

from asearcher_plugin.agent.reference_policy import ReferencePolicy
from asearcher_plugin.config import AgentConfig
from asearcher_plugin.sft import data as sft_data
from asearcher_plugin.sft.dataset import TokenSFTDataset, read_rows
from tests.helpers import run_cli, serve_app

PAGES = {
    "Angola": "Angola is a country in Southern Africa. The capital and largest city of Angola is Luanda.",
    "Algeria": "Algeria is a country in North Africa. Its capital and most populous city is Algiers.",
    "Austria": "Austria is a country in Central Europe. Vienna is its capital and largest city.",
    "Andorra": "Andorra is a microstate in the Pyrenees. Its capital is Andorra la Vella.",
}
ITEMS = [
    {"dataset": "t", "id": f"q{i}", "question": f"What is the capital of {name}?", "golden_answers": [answer]}
    for i, (name, answer) in enumerate(
        [("Angola", "Luanda"), ("Algeria", "Algiers"), ("Austria", "Vienna"), ("Andorra", "Andorra la Vella")]
    )
]


def kb_app() -> FastAPI:
    """Search-R1's /retrieve: the page named in the query first, then the others."""
    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve(body: dict):
        out = []
        for query in body["queries"]:
            names = sorted(PAGES, key=lambda n: n not in query)[: body.get("topk", 3)]
            out.append(
                [
                    {"document": {"id": n, "contents": f'"{n}"\n{PAGES[n]}', "title": n}, "score": 1.0}
                    for n in names
                ]
            )
        return {"result": out}

    return app


class RecordingPolicy(ReferencePolicy):
    """The reference policy, keeping every call: the ids it was given and the ids it returned."""

    calls: list

    async def generate(self, prompt_token_ids, sampling_params):
        out = await super().generate(prompt_token_ids, sampling_params)
        self.calls.append((list(prompt_token_ids), list(out.outputs[0].token_ids)))
        return out


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory, tokenizer):
    """One eval of the teacher, k = 2: (run folder, recorded calls)."""
    from asearcher_plugin.eval.runner import run_eval

    out = tmp_path_factory.mktemp("teacher")
    with serve_app(kb_app()) as url:
        config = AgentConfig.model_validate(
            {
                "agent_type": "search-r1",
                "max_turns": 4,
                "max_new_tokens_per_turn": 64,
                "tools": {"backend": "local", "topk": 2, "local": {"urls": [url]}},
                "reward": {"metric": "f1", "format_factor": True},
            }
        )
        engine = RecordingPolicy.for_items(tokenizer, config, ITEMS, wrong_rate=0.3)
        engine.calls = []
        asyncio.run(run_eval(ITEMS, config, engine, tokenizer, out, k=2, max_length=2048, progress=False))
    return out, engine.calls


def expected_mask(ids: list[int], calls: list) -> list[int]:
    """1 where some recorded call generated the token at that position of `ids` (its input a prefix of `ids`)."""
    mask = [0] * len(ids)
    for prompt, generated in calls:
        end = len(prompt) + len(generated)
        if end <= len(ids) and ids[:end] == prompt + generated:
            mask[len(prompt) : end] = [1] * len(generated)
    return mask


def test_mask_covers_exactly_the_generated_tokens(teacher_run, tmp_path, tokenizer):
    run, calls = teacher_run
    manifest = sft_data.build([run], tmp_path, min_reward=1.0, heldout=0.0)
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert rows and manifest["sequences_written"]["train"] == len(rows)
    for row in rows:
        ids, mask = row["input_ids"], row["loss_mask"]
        assert mask == expected_mask(ids, calls)
        # every call that built this sequence was recorded: the sequence is what the last one saw and generated
        assert any(p + g == ids for p, g in calls)
        generated = tokenizer.decode([t for t, m in zip(ids, mask) if m])
        shown = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
        assert "<search>" in generated and "<answer>" in generated
        assert "<information>" in shown and "<information>" not in generated  # tool output never trained on

    # what OpenRLHF's SFTTrainer trains on: the log-prob of inputs[:, 1:] where loss_masks[:, :-1] is 1
    dataset = TokenSFTDataset(read_rows(str(tmp_path / "train.jsonl")), tokenizer, 4096)
    inputs, attention, loss_masks = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        assert inputs[i, :n].tolist() == row["input_ids"] and attention[i].sum() == n  # nothing appended
        targets = inputs[i, 1:][loss_masks[i, :-1].bool()].tolist()
        assert targets == [t for t, m in zip(row["input_ids"], row["loss_mask"]) if m]


def test_rejection_sampling_split_and_reasons(teacher_run, tmp_path):
    run, _ = teacher_run
    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    rewards = [r["reward"] for r in rows]
    assert 0 < rewards.count(1.0) < len(rows)  # the teacher is wrong now and then: something to reject
    result = run_cli("sft-data", str(run), "--out", str(tmp_path / "d"), "--heldout", "0.5", "--best-of", "1")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    below = sum(1 for r in rewards if r < 1.0)
    assert manifest["trajectories_dropped"]["reward below 1"] == below
    assert f"dropped {below}: reward below 1" in result.stdout
    correct_questions = {r["id"] for r in rows if r["reward"] == 1.0}
    both = sum(1 for q in correct_questions if sum(r["id"] == q and r["reward"] == 1.0 for r in rows) == 2)
    assert manifest["trajectories_dropped"].get("not among the best 1 of its question", 0) == both
    split = {
        s: {json.loads(line)["question_id"] for line in (tmp_path / "d" / f"{s}.jsonl").read_text().splitlines()}
        for s in ("train", "heldout")
    }
    assert not split["train"] & split["heldout"]
    assert split["train"] | split["heldout"] == {f"t/{q}" for q in correct_questions}

    # without best-of, both seeds' identical transcripts of a question are one row
    again = sft_data.build([run], tmp_path / "all", min_reward=1.0, heldout=0.0)
    assert again["sequences_dropped"].get("duplicate of a sequence already written", 0) >= 1
    texts = (tmp_path / "all" / "train.jsonl").read_text().splitlines()
    assert len({json.dumps(json.loads(t)["input_ids"]) for t in texts}) == len(texts)


def test_bad_input_named(tmp_path, tokenizer):
    (tmp_path / "t.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    result = run_cli("sft-data", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "o"))
    assert result.returncode == 2 and "t.jsonl:1: neither an eval row" in result.stderr
    with pytest.raises(ValueError, match="x.jsonl:3: 9 tokens, more than --data.max_len 8"):
        TokenSFTDataset([{"input_ids": [1] * 9, "loss_mask": [0] * 8 + [1], "_where": "x.jsonl:3"}], tokenizer, 8)
