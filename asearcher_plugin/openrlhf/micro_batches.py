"""Per-call updates cut by tokens: the ranks' shares, the micro-batches of each optimizer step, the loss scale.

A trajectory of 128 calls is 128 samples, so micro-batches of a fixed number of samples grow with the calls per
trajectory. Here, for `agent.training_sequences: per_call`:

- the trainer hands each policy rank one share of the batch's samples, balanced by tokens (`rank_shares`), not
  OpenRLHF's slices by count, which can leave a rank with nothing while the others wait for it in a collective;
- each rank keeps the batch's `rollout.batch_size x n / train.batch_size` optimizer steps, splits its samples over
  them by tokens, and cuts each step into micro-batches of at most `--train.max_tokens_per_gpu` tokens (padded
  tokens when samples are not packed: what the forward costs). Every rank runs the same number of micro-batches in
  a step (the most any rank needs); a rank with fewer runs padding micro-batches whose loss is scaled to zero, so
  DeepSpeed's collectives pair up and nothing hangs (`plan_update`);
- DeepSpeed's accumulation boundary is set at the last micro-batch of each step, whatever the count, and every
  micro-batch's loss is normalised by the step's action tokens over all ranks: OpenRLHF's `aggregate_loss` gives
  `sum(loss * mask) / batch_num_tokens * dp_size`, DeepSpeed divides by its configured accumulation steps G and
  averages over ranks, so with `batch_num_tokens = step tokens / G` the step's gradient is the token mean over the
  step, exactly what one micro-batch holding all its tokens would give (`ordered_micro_batches`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

PADDING = float("inf")  # a padding micro-batch's normaliser: loss and gradient exactly 0


class MicroBatchError(RuntimeError):
    pass


@dataclass
class MicroBatch:
    indices: list[int]  # replay-buffer items
    step: int
    boundary: bool  # the last micro-batch of its optimizer step
    padding: bool = False


def cost(lengths: list[int], packed: bool) -> int:
    """Tokens a micro-batch puts through the forward: the sum when packed, else every sample padded to the longest."""
    if not lengths:
        return 0
    return sum(lengths) if packed else len(lengths) * max(lengths)


def balanced(lengths: list[int], parts: int) -> list[list[int]]:
    """Indices split into `parts` lists of about equal tokens (longest first, each to the lightest list)."""
    out: list[list[int]] = [[] for _ in range(parts)]
    load = [0] * parts
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        j = min(range(parts), key=lambda j: (load[j], len(out[j]), j))
        out[j].append(i)
        load[j] += lengths[i]
    return out


def under_budget(indices: list[int], lengths: list[int], budget: int, packed: bool) -> list[list[int]]:
    """Longest first, each micro-batch filled while it stays within `budget` tokens (a longer sample goes alone).
    Sorted, a micro-batch's padded cost is its count times its first length: linear in the samples, which at 128
    calls per trajectory are tens of thousands on a rank."""
    bins: list[list[int]] = []
    total = 0
    for i in sorted(indices, key=lambda i: -lengths[i]):
        if bins:
            b = bins[-1]
            grown = total + lengths[i] if packed else (len(b) + 1) * lengths[b[0]]
            if grown <= budget:
                b.append(i)
                total += lengths[i]
                continue
        bins.append([i])
        total = lengths[i]
    return bins


def plan_steps(lengths: list[int], steps: int, budget: int, packed: bool, agree=None) -> list[MicroBatch]:
    """This rank's micro-batches, step by step. `agree(counts)` returns the element-wise maximum over the ranks
    (identity on one rank)."""
    if not lengths:
        raise MicroBatchError("no sequences on this rank: the trainer gives every policy rank a share of the batch")
    shares = balanced(lengths, steps)
    cut = [under_budget(share, lengths, budget, packed) for share in shares]
    counts = [max(len(c), 1) for c in cut]
    if agree is not None:
        counts = agree(counts)
    shortest = min(range(len(lengths)), key=lambda i: lengths[i])
    plan = []
    for step, (bins, count) in enumerate(zip(cut, counts, strict=True)):
        filled = [MicroBatch(b, step, False) for b in bins]
        filled += [MicroBatch([shortest], step, False, padding=True) for _ in range(count - len(bins))]
        filled[-1].boundary = True
        plan.extend(filled)
    return plan


def loss_infos(plan: list[MicroBatch], action_tokens: list[int], gas: int, dp_size: int, total=None) -> list[dict]:
    """OpenRLHF's `loss_batch_info` per micro-batch: the step's action tokens (summed over the ranks by
    `total(per_step)`) over DeepSpeed's accumulation steps; a padding micro-batch's normaliser is infinite."""
    steps = max(m.step for m in plan) + 1
    tokens = [0.0] * steps
    samples = [0.0] * steps
    for m in plan:
        if not m.padding:
            tokens[m.step] += sum(action_tokens[i] for i in m.indices)
            samples[m.step] += sum(action_tokens[i] > 0 for i in m.indices)
    if total is not None:
        tokens, samples = total(tokens), total(samples)
    infos = []
    for m in plan:
        if m.padding:
            infos.append({"dp_size": dp_size, "batch_num_tokens": PADDING, "global_batch_size": PADDING})
        else:
            infos.append(
                {
                    "dp_size": dp_size,
                    "batch_num_tokens": torch.tensor(max(tokens[m.step], 1.0) / gas),
                    "global_batch_size": torch.tensor(max(samples[m.step], 1.0) / gas),
                }
            )
    return infos


def _collective(strategy):
    """Max and sum over the data-parallel ranks, or None on one process."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None, None, 1
    mesh = getattr(strategy, "ds_device_mesh", None)
    group = mesh["dp"].get_group() if mesh is not None else None

    def reduce(values, op):
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=op, group=group)
        return t.tolist()

    return (
        lambda v: [int(x) for x in reduce(v, dist.ReduceOp.MAX)],
        lambda v: reduce(v, dist.ReduceOp.SUM),
        dist.get_world_size(group=group),
    )


def plan_update(buffer, strategy) -> tuple[list[MicroBatch], list[dict]]:
    """The replay buffer's samples as this update's micro-batches (buffer.dynamic_indices) and their loss infos."""
    args = strategy.args
    steps = max(args.rollout.batch_size * args.rollout.n_samples_per_prompt // args.train.batch_size, 1)
    lengths = [int(item.total_length.item()) for item in buffer.items]
    action = [int(item.action_mask.sum().item()) for item in buffer.items]
    agree, total, dp_size = _collective(strategy)
    budget = int(args.train.max_tokens_per_gpu)
    plan = plan_steps(lengths, steps, budget, bool(args.ds.packing_samples), agree)
    infos = loss_infos(plan, action, max(int(strategy.accumulated_gradient), 1), dp_size, total)
    buffer.dynamic_indices = [m.indices for m in plan]
    buffer.dynamic_batch, buffer.sample_batch_size = True, 1
    return plan, infos


@contextlib.contextmanager
def ordered_micro_batches(plan: list[MicroBatch], infos: list[dict], engine):
    """For one `ppo_train` in this process: micro-batches in plan order (no shuffle), each with its loss info and
    DeepSpeed's accumulation boundary set before its backward."""
    from openrlhf.trainer.ray import ppo_actor

    loader, grouping = ppo_actor.DataLoader, ppo_actor.iter_grad_accum_global_norm

    def in_order(*args, **kwargs):
        return loader(*args, **{**kwargs, "shuffle": False})

    def with_plan(data_iter, strategy, accumulated_gradient, mask_fn):
        for item, m, info in zip(data_iter, plan, infos, strict=True):
            engine.set_gradient_accumulation_boundary(m.boundary)
            yield item, info

    ppo_actor.DataLoader, ppo_actor.iter_grad_accum_global_norm = in_order, with_plan
    try:
        yield
    finally:
        ppo_actor.DataLoader, ppo_actor.iter_grad_accum_global_norm = loader, grouping


def rank_shares(experiences: list, ranks: int) -> list:
    """The batch's samples as one Experience per policy rank, balanced by tokens (every rank gets at least one)."""
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch, split_experience_batch

    items = [item for exp in experiences for item in split_experience_batch(exp)]
    if len(items) < ranks:
        raise MicroBatchError(f"{len(items)} sequences for {ranks} policy ranks: every rank needs one")
    lengths = [int(item.attention_mask.sum()) for item in items]
    return [make_experience_batch([items[i] for i in sorted(share)]) for share in balanced(lengths, ranks)]


def every_rank(sample_batches: list, samples: list, ranks: int, pad_token_id: int) -> list:
    """OpenRLHF's sample batches for the models' forward, the same number on every policy rank.

    OpenRLHF's dispatch hands the batches out by count, `ceil(batches / ranks)` to a rank (`launcher.py`,
    `async_run_method_batch`): 5 batches on 2 ranks are 3 forwards on one and 2 on the other. Under ZeRO-3 every
    forward gathers the parameters collectively, so the rank with fewer forwards leaves the other waiting forever.
    A rollout batch's sample count varies (per-call sequences, groups filtered or failed alone, the data's end), and
    fewer batches than ranks stops the dispatch outright. So a count that is not a multiple of `ranks` is re-cut into
    the next multiple of consecutive slices of near-equal sample counts (one sample more than
    `rollout.micro_batch_size` in a slice only when there are too few samples for the next multiple)."""
    if sample_batches and len(sample_batches) % ranks == 0:
        return sample_batches
    if len(samples) < ranks:
        raise MicroBatchError(
            f"a rollout batch of {len(samples)} samples for {ranks} policy ranks: every rank needs one (run fewer "
            "policy actors, or more samples per prompt)"
        )
    from openrlhf.trainer.ppo_utils.experience import Experience

    count = min(-(-len(sample_batches) // ranks) * ranks, len(samples) // ranks * ranks)
    count = max(count, ranks)
    bounds = [i * len(samples) // count for i in range(count + 1)]
    return [Experience.concat_experiences(samples[a:b], pad_token_id) for a, b in zip(bounds, bounds[1:])]
