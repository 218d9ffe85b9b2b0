"""The decision task's reward (`agent.reward.function: benchmarks.decision_reward:score`): the answer's F1, times the
format factor, less a small cost for every search and page read, so that searching is a decision. An `Echo WORD?`
answered without searching scores 1; searched once first, 0.95; a `Word after WORD?` whose result already showed
the word loses 0.05 more when the page is opened anyway."""

from __future__ import annotations

from asearcher_plugin.rewards.reward import f1_score, format_factor, parse_gold

TOOL_COST = 0.05  # a fraction of a right answer: never worth skipping the search a question needs


def score(question: str, answer: str | None, label, counters: dict) -> float:
    if answer is None:
        return 0.0
    right = f1_score(answer, parse_gold(label)) * format_factor(int(counters["invalid_actions"]), True)
    return right - TOOL_COST * (counters["searches"] + counters["accesses"])
