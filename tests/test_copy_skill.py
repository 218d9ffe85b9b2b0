"""benchmarks/copy_skill.py's associative recall: the target is a key's latest value, the loss is read there only."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.copy_skill import recall_batch, scored_loss  # noqa: E402


def test_each_asked_key_is_followed_by_its_latest_value_and_half_the_keys_had_two():
    import torch

    vocab = list(range(1000, 1400))
    ids, positions, twice = recall_batch(torch.Generator().manual_seed(3), vocab, batch=4, pairs=12)
    overwritten = 0
    for row, asked, marked in zip(ids.tolist(), positions.tolist(), twice.tolist()):
        assert len(asked) == 12 and all(t in vocab for t in row)
        first_part, asked_from = row[:24], asked[0]
        first = dict(zip(first_part[::2], first_part[1::2]))
        latest = dict(zip(row[:asked_from:2], row[1:asked_from:2]))  # the later pair of a key wins
        assert sorted(row[p] for p in asked) == sorted(first)  # every key asked once
        shown = Counter(row[:asked_from:2])
        for p, mark in zip(asked, marked):
            assert row[p + 1] == latest[row[p]]
            assert mark == (shown[row[p]] == 2)  # marked exactly when the key was shown again before it is asked
            overwritten += latest[row[p]] != first[row[p]]
    assert overwritten >= 4 * 6 - 2  # half of each row's keys had a new value (a redraw may repeat the old one)


def test_the_loss_is_the_cross_entropy_of_the_asked_values_only(tiny_model):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
    ids, positions, _ = recall_batch(torch.Generator().manual_seed(0), list(range(100, 400)), batch=2, pairs=6)
    logits = model(input_ids=ids).logits
    expected = torch.stack([F.cross_entropy(logits[b, p], ids[b, p + 1]) for b in range(2) for p in positions[b]])
    with torch.no_grad():
        assert torch.allclose(scored_loss(model, ids, positions), expected.mean(), atol=1e-5)
