"""Per-call training sequences in OpenRLHF 0.11.2's trainer: advantages per trajectory, optimizer steps per batch.

With `agent.training_sequences: per_call` a trajectory reaches the trainer as one or several samples (its
sequences, see `agent/sequences.py`), each carrying the trajectory's reward. Two places in OpenRLHF assume one
sample per trajectory, and each gets a hook here, installed with the streaming scheduler:

- Advantages (`RemoteExperienceMaker.compute_advantages_and_returns`, in the trainer actor): OpenRLHF reshapes the
  batch's rewards by `n_samples_per_prompt`, so a trajectory split into 5 sequences would weigh 5 times in its
  group's statistics and be compared against its own pieces. The hook computes the estimator's baseline once per
  trajectory, over the n trajectories of its prompt (rloo, reinforce_baseline, dr_grpo, group_norm; flash_reinforce
  over the batch's trajectories), gives that value to every sequence of the trajectory, and then runs OpenRLHF's own
  method for the rest (KL in the reward, per-token returns, GAE, the batch whitening of the estimators that whiten)
  with the baseline already taken: for that call `n_samples_per_prompt` is 1 and the estimator's name one that
  shapes nothing but whitens exactly when the real one does.
- Optimizer steps (the policy actor's replay buffer): a rollout batch of B prompts x n trajectories must be trained
  as the `B * n / train.batch_size` optimizer steps the flags ask for, whatever number of sequences it split into.
  OpenRLHF's fixed-size micro-batches would drop the sequences past a multiple of the micro-batch size and carry a
  partial gradient-accumulation window into the next update. The hook partitions the buffer into exactly
  steps x gradient-accumulation micro-batches, balanced by tokens, through the buffer's own dynamic-batch indices;
  OpenRLHF's loss then normalises each optimizer step over its action tokens as usual.
"""

from __future__ import annotations

import torch

TRAJECTORY_KEY = "asearcher_trajectory"  # which trajectory of the batch a sample is part of
GROUP_KEY = "asearcher_group"  # which group (prompt) of the batch
# Estimators whose baseline OpenRLHF takes over the prompt's group, and those it whitens over the batch after.
GROUP_ESTIMATORS = ("rloo", "reinforce_baseline", "dr_grpo", "group_norm", "flash_reinforce")
WHITENED = ("gae", "reinforce", "reinforce_baseline")
NO_SHAPING = "asearcher_baseline_taken"  # no branch of OpenRLHF's shaping or whitening matches this name


class PerCallError(RuntimeError):
    pass


def trajectory_baselines(rewards: torch.Tensor, groups: torch.Tensor, estimator: str) -> tuple:
    """Per trajectory: its reward with the estimator's baseline taken, and its group's reward std."""
    shaped, stds = rewards.clone(), torch.zeros_like(rewards)
    for g in groups.unique():
        members = groups == g
        r = rewards[members]
        k = r.numel()
        stds[members] = r.std() if k > 1 else 0.0
        if estimator == "rloo":
            if k < 2:
                raise PerCallError(f"rloo needs at least 2 trajectories per prompt, group {int(g)} has {k}")
            shaped[members] = r - (r.sum() - r) / (k - 1)
        elif estimator in ("reinforce_baseline", "dr_grpo"):
            shaped[members] = r - r.mean()
        elif estimator == "group_norm":
            shaped[members] = (r - r.mean()) / (r.std() + 1e-9)
    if estimator == "flash_reinforce":
        shaped = rewards - rewards.mean()
    return shaped, stds


def compute_per_trajectory(maker, experiences, original):
    """`compute_advantages_and_returns` for per-call samples (see the module docstring); `original` is OpenRLHF's."""
    args = maker.strategy.args
    rows = [exp.info.pop(TRAJECTORY_KEY).long() for exp in experiences]
    row_groups = [exp.info.pop(GROUP_KEY).long() for exp in experiences]
    trajectory, group = torch.cat(rows), torch.cat(row_groups)
    raw = torch.cat([exp.rewards.float() for exp in experiences])
    count = int(trajectory.max()) + 1
    rewards = torch.zeros(count).scatter_(0, trajectory, raw)  # every sequence carries its trajectory's reward
    groups = torch.zeros(count, dtype=torch.long).scatter_(0, trajectory, group)
    estimator = args.algo.advantage.estimator
    shaped, stds = trajectory_baselines(rewards, groups, estimator)
    pieces = torch.bincount(trajectory, minlength=count).float()  # sequences per trajectory
    for exp, t in zip(experiences, rows):
        exp.rewards = shaped[t].to(exp.rewards.dtype if exp.rewards.is_floating_point() else torch.float32)
        exp.info["group_reward_std"] = stds[t]
        exp.info["sequences_per_trajectory"] = pieces[t]
    n = args.rollout.n_samples_per_prompt
    try:
        args.rollout.n_samples_per_prompt = 1
        args.algo.advantage.estimator = "reinforce" if estimator in WHITENED else NO_SHAPING
        experiences = original(experiences)
    finally:
        args.rollout.n_samples_per_prompt, args.algo.advantage.estimator = n, estimator
    for exp, t in zip(experiences, rows):  # OpenRLHF logs `rewards` as the reward: the trajectory's, not shaped
        if "reward" in exp.info:
            exp.info["reward"] = rewards[t].to(exp.info["reward"].dtype)
    return experiences


def partition_batch(buffer, strategy) -> None:
    """The replay buffer's samples as exactly the micro-batches of the batch's optimizer steps, balanced by tokens."""
    from openrlhf.utils.seqlen_balancing import get_seqlen_balanced_partitions

    args = strategy.args
    steps = args.rollout.batch_size * args.rollout.n_samples_per_prompt // args.train.batch_size
    micro_batches = max(steps, 1) * max(int(strategy.accumulated_gradient), 1)
    if not buffer.items:
        return
    if len(buffer.items) < micro_batches:
        raise PerCallError(
            f"{len(buffer.items)} sequences on this rank for {micro_batches} micro-batches "
            f"({steps} optimizer steps x {strategy.accumulated_gradient} accumulation): lower train.batch_size "
            "or raise train.micro_batch_size"
        )
    lengths = [int(item.total_length.item()) for item in buffer.items]
    buffer.dynamic_indices = get_seqlen_balanced_partitions(lengths, micro_batches, equal_size=False)
    buffer.dynamic_batch, buffer.sample_batch_size = True, 1


class PerCallTrainer:
    """Mixed into OpenRLHF's async `TrainingActor`: its experience maker computes advantages per trajectory."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        maker = self.experience_maker
        original = maker.compute_advantages_and_returns
        maker.compute_advantages_and_returns = lambda experiences: compute_per_trajectory(maker, experiences, original)


class PerCallPolicy:
    """Mixed into OpenRLHF's `PolicyModelActor`: each update trains the batch's sequences as its optimizer steps."""

    def fit(self, kl_ctl: float = 0):
        partition_batch(self.trainer.replay_buffer, self.strategy)
        return super().fit(kl_ctl)


def mixed(actor_class, mixin):
    """A Ray actor class of OpenRLHF's with `mixin` in front, decorated with the same resources."""
    import ray

    meta = actor_class.__ray_metadata__
    base = meta.modified_class.__ray_actor_class__
    cls = type(base.__name__, (mixin, base), {"__module__": base.__module__})
    return ray.remote(num_gpus=meta.num_gpus)(cls) if meta.num_gpus else ray.remote(cls)
