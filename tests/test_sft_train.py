"""`asearcher sft RECIPE --cpu`: OpenRLHF 0.11.2's own SFT command (parser, `train()`, DeepSpeed, `SFTTrainer`) on
an `sft-data` dataset, on DeepSpeed's CPU accelerator. After it, greedy decoding on a training transcript gives the
teacher's next action, where the model it started from does not; the checkpoint it writes loads in
`asearcher eval --hf-model` and answers the training question as the teacher did.

One training question: a few minutes of SFT on 2 cores memorise one transcript; several questions would ask the tiny
model to learn to copy the question into its search, which takes far longer (measured: 4 questions x 80 epochs
reproduced 6 of 8 actions, the search's country name still a guess among the four)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from asearcher_plugin.sft import data as sft_data
from asearcher_plugin.sft.recipe import write_cpu_recipe
from tests.helpers import run_cli, serve_app
from tests.sft_teacher import ITEMS, kb_app, teach

pytestmark = pytest.mark.slow


def greedy(model, prefix: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prefix]), max_new_tokens=n, do_sample=False, min_new_tokens=n)
    return out[0, len(prefix) :].tolist()


def spans(mask: list[int]) -> list[tuple[int, int]]:
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


def next_actions_reproduced(model_dir, rows) -> int:
    """Generated spans of the training rows that greedy decoding from the transcript before them gives back."""
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    hits = 0
    for row in rows:
        for start, end in spans(row["loss_mask"]):
            hits += greedy(model, row["input_ids"][:start], end - start) == row["input_ids"][start:end]
    return hits


def test_sft_then_greedy_reproduces_the_teacher(tmp_path, tiny_model, tokenizer):
    teach(tmp_path / "teacher", tokenizer, k=1, wrong_rate=0.0, items=ITEMS[:1])
    sft_data.build([tmp_path / "teacher"], tmp_path / "data", min_reward=1.0, heldout=0.0)
    rows = [json.loads(line) for line in (tmp_path / "data" / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    actions = sum(len(spans(r["loss_mask"])) for r in rows)
    assert actions == 2  # its search, then its answer
    assert next_actions_reproduced(tiny_model, rows) == 0  # the random model does not know them

    out = tmp_path / "sft-model"
    recipe = write_cpu_recipe(
        tmp_path / "warm.yaml",
        tiny_model,
        tmp_path / "data" / "train.jsonl",
        out,
        tmp_path / "ckpt",
        **{"train.batch_size": 1, "train.micro_batch_size": 1, "train.max_epochs": 40, "adam.lr": 0.005},
        lr_warmup_ratio=0.05,
    )
    result = run_cli("sft", str(recipe), "--cpu", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "config.json").is_file()
    assert next_actions_reproduced(out, rows) == actions  # search, then answer: each as the teacher wrote it

    with serve_app(kb_app()) as url:
        ran = run_cli(
            "eval",
            "--dataset",
            str(write_items(tmp_path / "items.jsonl")),
            "--hf-model",
            str(out),
            "--kb-url",
            url,
            "--set",
            "agent.agent_type=search-r1",
            "--set",
            "agent.tools.topk=2",
            "--temperature",
            "0",
            "--max-length",
            "2048",
            "--out",
            str(tmp_path / "eval"),
        )
    assert ran.returncode == 0, ran.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics_f1(metrics) == 1.0


def write_items(path):
    path.write_text("".join(json.dumps(item) + "\n" for item in ITEMS[:1]))
    return path


def metrics_f1(metrics: dict) -> float:
    return metrics["datasets"]["overall"]["f1"]["avg@1"]
