"""What a rollout can fail with, besides a failed trajectory."""

from __future__ import annotations


class FatalRolloutError(RuntimeError):
    """Not a failed trajectory but a broken fleet (e.g. an engine died): stops the scheduler."""


class EndpointOutage(RuntimeError):
    """A group met a tool endpoint that failed for the infrastructure's sake: discard it and run it again."""

    def __init__(self, message: str, trajectories: int = 0):
        super().__init__(message)
        self.trajectories = trajectories  # the group's trajectories thrown away


class OutageBudgetExceeded(FatalRolloutError):
    """The tool endpoints stayed down longer than the run allows."""
