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
  partial gradient-accumulation window into the next update, and grow with the calls per trajectory. The hooks
  (micro_batches.py) give each rank a share by tokens, keep the steps, cut each into micro-batches under a token
  budget, and normalise each step's loss over its action tokens.
"""

from __future__ import annotations

import math

import torch

from .micro_batches import cost, every_rank, ordered_micro_batches, plan_update, rank_shares

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


def policy_ranks(group) -> int:
    """The data-parallel ranks of an OpenRLHF actor group (policy, reference, critic), counted as its batch dispatch
    counts them (ring attention and tensor-parallel copies of a rank share its data)."""
    return len(group._actor_handlers) // group.duplicate_actors


def forward_ranks(maker) -> int:
    """The batch count every model group's dispatch splits evenly: the least common multiple of their ranks."""
    groups = (maker.actor_model_group, maker.critic_model_group, maker.initial_model_group)
    return math.lcm(*(policy_ranks(g) for g in groups if g is not None))


class EveryRankSamples:
    """Mixed into OpenRLHF's async `TrainingActor`: every rank of every model group runs the same number of
    experience forwards (`micro_batches.every_rank`), where OpenRLHF's dispatch would stop the run on a short batch
    or, under ZeRO-3, leave the ranks waiting on each other."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        maker = self.experience_maker
        ranks, split = forward_ranks(maker), maker.split_rollout_samples
        pad = maker.tokenizer.pad_token_id
        maker.split_rollout_samples = lambda samples: every_rank(split(samples), samples, ranks, pad)


class PerCallTrainer(EveryRankSamples):
    """Mixed into OpenRLHF's async `TrainingActor`: its experience maker computes advantages per trajectory, and
    each policy rank gets a share of the batch balanced by tokens (micro_batches.py)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        maker = self.experience_maker
        original = maker.compute_advantages_and_returns
        maker.compute_advantages_and_returns = lambda experiences: compute_per_trajectory(maker, experiences, original)
        group = self.actor_model_group
        by_count = group.async_run_method_batch

        def by_tokens(method_name, **kwargs):
            if method_name == "append":
                kwargs["experience"] = rank_shares(kwargs["experience"], policy_ranks(group))
            return by_count(method_name=method_name, **kwargs)

        group.async_run_method_batch = by_tokens


class PerCallPolicy:
    """Mixed into OpenRLHF's `PolicyModelActor`: each update trains the batch's sequences as its optimizer steps, in
    micro-batches of at most --train.max_tokens_per_gpu tokens (micro_batches.py)."""

    def fit(self, kl_ctl: float = 0):
        buffer = self.trainer.replay_buffer
        plan, infos = plan_update(buffer, self.strategy)
        packed = bool(self.strategy.args.ds.packing_samples)
        self.asearcher_micro_batches = [  # what this update ran, for logs and benchmarks
            {
                "step": m.step,
                "tokens": cost([int(buffer.items[i].total_length) for i in m.indices], packed),
                "sequences": len(m.indices),
                "padding": m.padding,
            }
            for m in plan
        ]
        with ordered_micro_batches(plan, infos, self.actor.model):
            return super().fit(kl_ctl)


def mixed(actor_class, mixin):
    """A Ray actor class of OpenRLHF's with `mixin` in front, decorated with the same resources."""
    import ray

    meta = actor_class.__ray_metadata__
    base = meta.modified_class.__ray_actor_class__
    cls = type(base.__name__, (mixin, base), {"__module__": base.__module__})
    return ray.remote(num_gpus=meta.num_gpus)(cls) if meta.num_gpus else ray.remote(cls)
