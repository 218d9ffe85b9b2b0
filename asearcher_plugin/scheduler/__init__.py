"""Trajectory-level streaming rollout with staleness control."""

from .core import Group, StreamingScheduler

__all__ = ["Group", "StreamingScheduler"]
