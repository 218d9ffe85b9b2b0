"""The scheduler settings of a run, resolved against OpenRLHF's args (no OpenRLHF import: `--dry-run` uses it)."""

from __future__ import annotations

from ..settings.config import SchedulerConfig


class StreamingSettingsError(ValueError):
    pass


def resolve_settings(settings: SchedulerConfig, args) -> SchedulerConfig:
    """Fills the defaults from OpenRLHF's args and refuses combinations that cannot stream."""
    queue = args.train.async_queue_size
    if not args.train.async_enable or not args.train.partial_rollout_enable:
        raise StreamingSettingsError(
            "the streaming scheduler needs --train.async_enable and --train.partial_rollout_enable "
            "(groups run between generate_samples() calls, so weight broadcasts must pause the engines); "
            "set scheduler.enable: false to use OpenRLHF's own generator"
        )
    eta = queue + 2 if settings.max_staleness is None else settings.max_staleness
    if eta < queue:
        raise StreamingSettingsError(
            f"scheduler.max_staleness={eta} < --train.async_queue_size={queue}: "
            f"OpenRLHF's queue alone makes every batch {queue} versions stale, so admission would stall; "
            f"use max_staleness >= {queue} (streaming headroom is "
            f"max_staleness - async_queue_size batches)"
        )
    return settings.model_copy(
        update={"max_staleness": eta, "max_concurrent": settings.max_concurrent or args.rollout.batch_size}
    )


def check_per_call(args, settings: SchedulerConfig | None) -> None:
    """What `agent.training_sequences: per_call` needs of the run (see openrlhf/per_call.py)."""
    problems = []
    if settings is None:
        problems.append(
            "the streaming scheduler (scheduler.enable with --train.async_enable and --train.partial_rollout_enable): "
            "its trainer hooks weigh a trajectory's sequences as one trajectory"
        )
    if args.train.dynamic_batch_enable:
        problems.append(
            "no --train.dynamic_batch_enable: OpenRLHF's dynamic batches take a fixed number of samples per optimizer "
            "step and would leave out sequences; per_call balances the batch's sequences over its steps by tokens"
        )
    if args.reward.overlong_buffer_len is not None or args.reward.stop_properly_penalty_coef is not None:
        problems.append(
            "no --reward.overlong_buffer_len / --reward.stop_properly_penalty_coef: they judge one sample's length, "
            "and a per-call sequence is part of a trajectory"
        )
    budget, max_len = getattr(args.train, "max_tokens_per_gpu", None), getattr(args.data, "max_len", None)
    if budget is not None and max_len is not None and budget < max_len:
        problems.append(
            f"--train.max_tokens_per_gpu >= --data.max_len ({budget} < {max_len}): it bounds every micro-batch's "
            "tokens, and a sequence may be data.max_len long"
        )
    if getattr(args.actor, "loss_agg_mode", "token-mean") != "token-mean":
        problems.append(
            f"--actor.loss_agg_mode token-mean, not {args.actor.loss_agg_mode}: that mode weighs every sample the "
            "same, so a trajectory split into k sequences would weigh k times"
        )
    if args.algo.advantage.estimator == "rloo" and args.rollout.n_samples_per_prompt < 2:
        problems.append("rloo with --rollout.n_samples_per_prompt >= 2")
    if problems:
        raise StreamingSettingsError("agent.training_sequences: per_call needs " + "; ".join(problems))
