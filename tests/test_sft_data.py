"""`asearcher sft-data`: the dataset trains on exactly the tokens the engine generated, as the engine saw them.

A teacher (the scripted reference policy, a real HF tokenizer) answers through the real eval runner and agent, with
its searches answered by a knowledge-base server on loopback; every model call it receives and every token it
returns is recorded, and the rows `sft-data` writes are checked against that record, then against what OpenRLHF's
SFT trainer reads of them through `TokenSFTDataset`.
"""

from __future__ import annotations

import json

import pytest
import torch

from asearcher_plugin.sft import data as sft_data
from asearcher_plugin.sft.dataset import TokenSFTDataset, read_rows
from tests.helpers import run_cli
from tests.sft_teacher import teach


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory, tokenizer):
    """One eval of the teacher, k = 2: (run folder, recorded calls)."""
    out = tmp_path_factory.mktemp("teacher")
    return out, teach(out, tokenizer)


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
    # the batch OpenRLHF's own padding (SFTDataset.collate_fn's) makes of the same items, rows of unequal lengths
    from openrlhf.utils.utils import zero_pad_sequences

    assert len({len(row["input_ids"]) for row in rows}) > 1
    columns = zip(*[dataset[i] for i in range(len(dataset))])
    for got, column, value in zip((inputs, attention, loss_masks), columns, (dataset.pad_id, 0, 0), strict=True):
        assert torch.equal(got, zero_pad_sequences(list(column), "right", value))


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

    # the trajectories in the reverse order (the eval finishing them in another order) give the same file
    reversed_run = tmp_path / "reversed"
    reversed_run.mkdir()
    lines = (run / "trajectories.jsonl").read_text().splitlines()
    (reversed_run / "trajectories.jsonl").write_text("\n".join(reversed(lines)) + "\n")
    sft_data.build([reversed_run], tmp_path / "all-reversed", min_reward=1.0, heldout=0.0)
    assert (tmp_path / "all-reversed" / "train.jsonl").read_text().splitlines() == texts


def test_bad_input_named(tmp_path, tokenizer):
    (tmp_path / "t.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    result = run_cli("sft-data", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "o"))
    assert (
        result.returncode == 2
        and "t.jsonl:1: neither an eval row" in result.stderr
        and "Traceback" not in result.stderr
    )
    with pytest.raises(ValueError, match="x.jsonl:3: 9 tokens, more than --data.max_len 8"):
        TokenSFTDataset([{"input_ids": [1] * 9, "loss_mask": [0] * 8 + [1], "_where": "x.jsonl:3"}], tokenizer, 8)


def test_malformed_rows_fail_alone_named_and_the_good_ones_are_written(teacher_run, tmp_path):
    """A trajectories file is data from anyone: each bad row is one line naming file, line and field, exit 2, and
    the readable rows are still written; no out-of-range id reaches train.jsonl."""
    out, _ = teacher_run
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    # a row sft-data keeps (finished, reward 1: the teacher answers some questions wrong on purpose)
    good = [json.dumps(r) for r in rows if r.get("status") == "ok" and r.get("reward") == 1.0][:1]
    row = json.loads(good[0])
    seq = row["sequences"][0]

    def variant(**changes):
        return json.dumps({**row, **changes})

    bad = [
        (variant(seed="0"), "field 'seed'"),
        (variant(reward="1"), "field 'reward'"),
        (variant(sequences={"tokens": [1]}), "field 'sequences'"),
        (variant(reward=float("inf")), "field 'reward' is inf"),
        (variant(seed=0).replace('"seed": 0', '"seed": ' + "9" * 5000), "not JSON"),
        (variant(sequences=[{**seq, "action_ranges": [[1]]}]), "action_ranges[0] is not a [start, end] pair"),
        (variant(sequences=[{**seq, "action_ranges": [["a", "b"]]}]), "action_ranges[0]"),
        ("[" * 100_000, "JSON nested too deeply"),
        (variant(sequences=[{**seq, "tokens": [-5, *seq["tokens"][1:]]}]), "tokens[0] is '-5'"),
        (variant(sequences=[{**seq, "tokens": [10**30, *seq["tokens"][1:]]}]), "tokens[0]"),
        ("not a row", "not JSON"),
    ]
    path = tmp_path / "t.jsonl"
    with open(path, "wb") as fh:
        fh.write((good[0] + "\n").encode())
        for text, _ in bad:
            fh.write(text.encode() + b"\n")
        fh.write(b'{"dataset": "x", "id": "\xff\xfe"}\n')  # not UTF-8
    result = run_cli("sft-data", str(path), "--out", str(tmp_path / "o"), "--heldout", "0")
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    for n, (_, field) in enumerate(bad, 2):
        assert any(line.startswith(f"error: {path}:{n}: ") and field in line for line in errors), (n, field, errors)
    assert any(line.startswith(f"error: {path}:{len(bad) + 2}: not UTF-8") for line in errors)
    assert "Traceback" not in result.stderr
    written = [json.loads(line) for line in (tmp_path / "o" / "train.jsonl").read_text().splitlines()]
    assert written and all(0 <= t < 2**31 for r in written for t in r["input_ids"])  # the good row, kept


def test_sft_recipe_section_and_refusals(tmp_path):
    from asearcher_plugin.recipe import Recipe, RecipeError, openrlhf_argv
    from asearcher_plugin.sft.train import SFTRunError, check_flags

    recipe = tmp_path / "warm.yaml"
    recipe.write_text(
        "sft:\n  model.model_name_or_path: m\n  data.dataset: d/train.jsonl\n  ds.attn_implementation: sdpa\n"
        "  adam.betas: [0.9, 0.999]\n  max_norm: 0\n"
        "openrlhf:\n  actor.model_name_or_path: out\n"
    )
    model = Recipe.load(recipe, ["sft.train.max_epochs=3"])
    argv = openrlhf_argv(model.sft)
    assert argv[-2:] == ["--train.max_epochs", "3"] and "--data.dataset" in argv
    assert " ".join(argv).count("--adam.betas 0.9 0.999 --max_norm 0 ") == 1
    check_flags(argv, cpu=True)
    with pytest.raises(SFTRunError, match="--data.apply_chat_template"):
        check_flags([*argv, "--data.apply_chat_template"], cpu=True)
    with pytest.raises(SFTRunError, match="set it to sdpa"):
        check_flags(["--data.dataset", "x"], cpu=True)
    with pytest.raises(RecipeError, match="sft"):
        Recipe.load(recipe, ["sft.train.max_epochs={a: 1}"])
    printed = run_cli("sft", str(recipe), "--print-cmd")
    assert printed.returncode == 0 and "deepspeed --module asearcher_plugin.sft.train" in printed.stdout
    (tmp_path / "rl.yaml").write_text("openrlhf:\n  actor.model_name_or_path: out\n")
    missing = run_cli("sft", str(tmp_path / "rl.yaml"))
    assert missing.returncode == 2 and "no `sft:` section" in missing.stderr
