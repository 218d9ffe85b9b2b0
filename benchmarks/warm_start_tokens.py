"""Where a warm start loses the teacher's text: each token of held-out teacher trajectories scored by the model
(teacher forcing), per question kind of the decision task.

`python benchmarks/warm_start_tokens.py MODEL SFT_HELDOUT TASK_ROWS` (an `asearcher sft-data` file: `input_ids`,
`loss_mask`, `question_id`; and the decision task's rows its questions came from, for each question's kind) prints,
per kind, the chance that sampling at temperature 1 writes the whole trajectory exactly, the wrong tokens it samples
in one on average, the chance of the final answer's words and of its close (" </answer>"), then the (previous token,
token) pairs that carry the most of the loss. A pair the teacher writes with no cue in the context (a word its think
text names) stands out as a large share at a small count.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter, defaultdict
from pathlib import Path


def kinds_of(task_rows: Path) -> dict[str, str]:
    """Each question's kind by its id (decision_task.py's rows)."""
    rows = (json.loads(line) for line in task_rows.read_text().splitlines() if line.strip())
    return {row["id"]: row["kind"] for row in rows}


def kind_of_row(row: dict, kinds: dict[str, str]) -> str:
    """The kind of an sft-data row's question: its `question_id` is the eval's `dataset/id`."""
    qid = str(row.get("question_id", "")).rpartition("/")[2]
    if qid not in kinds:
        raise ValueError(f"question {row.get('question_id')!r} is not in the task's rows: pass the rows it came from")
    return kinds[qid]


def scored(model, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for every i >= 1."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1], -1)
    return logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def answer_span(ids: list[int], open_id: int, close_id: int) -> tuple[int, int]:
    """Positions of the last answer's tokens after `<answer>`, its close included."""
    start = max(i for i, t in enumerate(ids) if t == open_id) + 1
    return start, ids.index(close_id, start)


def summarise(rows: list[dict], tokenizer, model, kinds: dict[str, str]) -> tuple[dict, list]:
    open_id, close_id = tokenizer.convert_tokens_to_ids(["<answer>", "</answer>"])
    per_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    pairs = Counter()
    for row in rows:
        ids, mask = row["input_ids"], row["loss_mask"]
        kind = kind_of_row(row, kinds)
        logp = [0.0, *scored(model, ids)]
        taught = [i for i in range(1, len(ids)) if mask[i]]
        names = tokenizer.convert_ids_to_tokens(ids)
        for i in taught:
            pairs[(names[i - 1], names[i])] -= logp[i]
        start, end = answer_span(ids, open_id, close_id)
        stats = per_kind[kind]
        stats["whole"].append(math.exp(sum(logp[i] for i in taught)))
        stats["wrong"].append(sum(1 - math.exp(logp[i]) for i in taught))
        # the close: `</answer>`, with the space before it where the tokenizer wrote that as a token of its own
        close = end - 1 if end > start and not tokenizer.decode([ids[end - 1]]).strip() else end
        stats["words"].append(math.exp(sum(logp[start:close])))
        stats["close"].append(math.exp(sum(logp[close : end + 1])))
    table = {
        kind: {"trajectories": len(s["whole"]), **{k: sum(v) / len(v) for k, v in s.items()}}
        for kind, s in sorted(per_kind.items())
    }
    total = sum(pairs.values())
    return table, [(pair, loss / total) for pair, loss in pairs.most_common()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("heldout", type=Path, help="an `asearcher sft-data` file of teacher trajectories")
    ap.add_argument("task_rows", type=Path, help="the decision task's rows they answered (its train.jsonl)")
    ap.add_argument("--top", type=int, default=12, help="how many (previous token, token) pairs to list")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    rows = [json.loads(line) for line in args.heldout.read_text().splitlines() if line.strip()]
    table, pairs = summarise(rows, tokenizer, model, kinds_of(args.task_rows))
    print("| kind | trajectories | P(whole trajectory) | wrong tokens sampled | P(answer words) | P(answer close) |")
    print("|---|---|---|---|---|---|")
    for kind, s in table.items():
        print(f"| {kind} | {s['trajectories']} | {s['whole']:.3f} | {s['wrong']:.2f} | {s['words']:.2f} | "
              f"{s['close']:.2f} |")  # fmt: skip
    print("\n| previous token | token | share of the loss |\n|---|---|---|")
    for (before, token), share in pairs[: args.top]:
        print(f"| `{before}` | `{token}` | {share:.3f} |")


if __name__ == "__main__":
    main()
