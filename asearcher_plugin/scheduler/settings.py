"""The scheduler settings of a run, resolved against OpenRLHF's args (no OpenRLHF import: `--dry-run` uses it)."""

from __future__ import annotations

from ..config import SchedulerConfig


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
