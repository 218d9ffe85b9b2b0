"""The dataset OpenRLHF 0.11.2's `SFTTrainer` reads, holding `asearcher sft-data` rows as they are.

OpenRLHF's own `SFTDataset` re-tokenises text and appends `" " + EOS` to every sample; an agent transcript would
then not be trained on the ids the engine produced. `TokenSFTDataset` takes the constructor arguments
`train_sft.train` passes to `SFTDataset` and yields the same `(input_ids, attention_mask, loss_mask)` triples, built
from the row's ids and mask alone: nothing is tokenised, appended or cut.

One convention differs and is converted here: a row's `loss_mask` marks the tokens to learn (the generated ones),
while the trainer reads `loss_mask[:, :-1]` against the log-prob of the *next* token (`Actor.forward` returns the
log-prob of token t+1 at position t). So the trainer's mask at t is the row's mask at t+1.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset


class Rows(list):
    """A list of rows with the `select` that `train_sft.train` calls on what `blending_datasets` returns."""

    def select(self, indices) -> Rows:
        return Rows(self[i] for i in indices)


def read_rows(paths: str) -> Rows:
    """`--data.dataset` / `--eval.dataset`: comma-separated JSONL files of `asearcher sft-data`."""
    rows = Rows()
    for path in (p.strip() for p in paths.split(",") if p.strip()):
        for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                row = json.loads(line)
                row["_where"] = f"{path}:{line_no}"
                rows.append(row)
    return rows


def next_token_mask(mask: list[int]) -> list[float]:
    """The trainer's mask: position t trains the prediction of token t+1; the last position predicts nothing."""
    return [float(m) for m in mask[1:]] + [0.0]


class TokenSFTDataset(Dataset):
    """`SFTDataset`'s signature (`dataset, tokenizer, max_length, strategy, ...`); other keywords are OpenRLHF's
    text options (templates, multiturn, pretrain mode), which do not apply to token rows and are refused if set."""

    def __init__(self, dataset, tokenizer, max_length: int, strategy=None, **text_options):
        if text_options.get("pretrain_mode"):
            raise ValueError("token rows carry their own loss mask: --model.pretrain_mode_enable does not apply")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.items = []
        for row in dataset:
            where = row.get("_where", "row")
            ids, mask = row.get("input_ids"), row.get("loss_mask")
            if not isinstance(ids, list) or not isinstance(mask, list) or len(ids) != len(mask) or not ids:
                raise ValueError(f"{where}: needs input_ids and a loss_mask of the same length (asearcher sft-data)")
            if set(mask) - {0, 1} or not any(mask):
                raise ValueError(f"{where}: loss_mask holds 0/1 values and at least one 1")
            if len(ids) > max_length:
                raise ValueError(
                    f"{where}: {len(ids)} tokens, more than --data.max_len {max_length}; raise it or drop long rows "
                    "with `asearcher sft-data --max-len` (a cut sequence would not be what the engine saw)"
                )
            if max(ids) >= len(tokenizer):
                raise ValueError(f"{where}: token id {max(ids)} is outside the tokenizer's {len(tokenizer)} ids")
            self.items.append((ids, mask))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, idx):
        ids, mask = self.items[idx]
        input_ids = torch.tensor([ids], dtype=torch.long)
        return input_ids, torch.ones_like(input_ids), torch.tensor([next_token_mask(mask)], dtype=torch.float32)

    def collate_fn(self, item_list):
        """The batch `SFTDataset.collate_fn` returns: each of the three padded on the right to the longest row."""
        ids, attention, masks = zip(*item_list)
        return _pad(ids, self.pad_id), _pad(attention, 0), _pad(masks, 0.0)


def _pad(rows, value) -> torch.Tensor:
    """[1, L_i] tensors -> [B, max L_i], `value` on the right."""
    return pad_sequence([r[0] for r in rows], batch_first=True, padding_value=value, padding_side="right")
