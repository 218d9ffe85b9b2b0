"""Reward functions referenced by `reward.function` in tests/test_reward_function.py (imported by module path)."""

CALLS: list[dict] = []


def record(question, answer, label, counters):
    CALLS.append({"question": question, "answer": answer, "label": label, "counters": counters})
    return 0.25 + counters["searches"]


def brevity(question, answer, label, counters):
    """1 for a trajectory that stopped at once, falling to 0 at the whole budget (4 turns x 32 tokens)."""
    return max(0.0, 1.0 - counters["generated_tokens"] / 128)


def raises(question, answer, label, counters):
    raise KeyError("no_such_counter")


def not_a_number(question, answer, label, counters):
    return "high"


def nan(question, answer, label, counters):
    return float("nan")


def two_arguments(question, answer):
    return 1.0


NOT_CALLABLE = 3
