"""Trajectory-level streaming rollout with staleness control."""

from .core import FatalRolloutError, Group, StreamingScheduler

__all__ = ["FatalRolloutError", "Group", "StreamingScheduler"]
