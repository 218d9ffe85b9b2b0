"""A reward of the user's own: `reward.function: "module:callable"` in the agent config.

The callable is found once per process and called once per finished trajectory as
`fn(question=str, answer=str | None, label=<the dataset's label>, counters=dict[str, float])`; what it returns is the
trajectory's reward (a finite number). A bad reference is refused when the config loads; a function that raises or
returns something else fails the trajectory with an error naming the function, so a bug in it never becomes a reward.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable

from ..utils.dotted import resolve_reference

ARGUMENTS = ("question", "answer", "label", "counters")


class RewardFunctionError(ValueError):
    pass


@functools.cache
def resolve(spec: str) -> Callable:
    """`module:callable` -> the callable, checked to take the four keyword arguments."""
    fn = resolve_reference(spec, "reward.function", "my_rewards:score", RewardFunctionError)
    if not callable(fn):
        raise RewardFunctionError(f"reward.function {spec!r} is a {type(fn).__name__}, not a callable")
    try:
        inspect.signature(fn).bind(**dict.fromkeys(ARGUMENTS))
    except TypeError as exc:
        raise RewardFunctionError(
            f"reward.function {spec!r}: must accept the keyword arguments {', '.join(ARGUMENTS)} ({exc})"
        ) from None
    except ValueError:  # no signature to inspect (some builtins): the call will tell
        pass
    return fn


def call(spec: str, question: str, answer: str | None, label, counters: dict[str, float]) -> float:
    fn = resolve(spec)
    try:
        value = fn(question=question, answer=answer, label=label, counters=dict(counters))
    except Exception as exc:
        raise RewardFunctionError(f"reward.function {spec!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise RewardFunctionError(f"reward.function {spec!r} returned {value!r}; a reward is a finite number")
    return float(value)
