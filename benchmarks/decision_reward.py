"""The decision task's reward (`agent.reward.function: benchmarks.decision_reward:score`): the answer's F1, times the
format factor, less a small share for every search and page read, so that searching is a decision. An `Echo WORD?`
answered without searching scores 1; searched once first, 0.95; a `Word after WORD?` whose result already showed
the word loses 0.05 more when the page is opened anyway.

The cost is a share of what the answer earned, so a wrong answer scores 0 however many tools it used. Charged
outright, it gave a group whose answers were all wrong a reward spread of the tool counts alone, which the group's
normalisation scaled to full advantages that said "search less": in two RL runs such groups were 31% of the groups
and carried 44% and 66% of the advantages' weight, and the agent stopped searching (0.60 -> 0.02-0.06 a
trajectory)."""

from __future__ import annotations

import re

from asearcher_plugin.rewards.reward import f1_score, format_factor, parse_gold

READ_QUESTION = re.compile(r"^Word after (\w+)\?$")  # decision_task.py's `read` question
ECHO_QUESTION = re.compile(r"^Echo (\w+)\?$")  # and its `none` question

TOOL_COST = 0.05  # a share of a right answer: never worth skipping the search a question needs


def score(question: str, answer: str | None, label, counters: dict) -> float:
    if answer is None:
        return 0.0
    answer = stated_word(question, answer)
    right = f1_score(answer, parse_gold(label)) * format_factor(int(counters["invalid_actions"]), True)
    return right * max(0.0, 1.0 - TOOL_COST * (counters["searches"] + counters["accesses"]))


def stated_word(question: str, answer: str) -> str:
    """`Word after WORD?` may be answered as a phrase, "WORD next", and `Echo WORD?` as "Echo WORD": the phrase's rest
    is the answer (its first word alone is not). A copying model writes each answer after the token it follows in the
    question (decision_teacher.py --read-phrase, --cue-copies)."""
    question, words = question.strip(), answer.split()
    if len(words) < 2:
        return answer
    first = words[0].strip(",.;:").lower()
    read, echo = READ_QUESTION.match(question), ECHO_QUESTION.match(question)
    if (read and first == read.group(1).lower()) or (echo and first == "echo"):
        return " ".join(words[1:])
    return answer
