"""ASearcher's "valid instruction" mix (`agent.reward.valid_inst_ratio`).

ASearcher's training prompt lets the model answer "the question is invalid" (its INVALID sentence). For a share of the
questions (`valid_inst_ratio`, 0.3 in its configs) that sentence is replaced by one asking for the most likely
answer, and only there an answer holding an invalid word ("question", "invalid", ...) is penalised. ASearcher draws
once per question for all of its group's trajectories; here the draw is a hash of the question, so the group's
samples, which OpenRLHF runs as separate episodes, agree without talking to each other.
"""

from __future__ import annotations

import hashlib

from ..utils.template_check import INVALID_SENTENCE

# AReaL/ASearcher/train/prompts.py (inclusionAI/ASearcher@813e804), VALID_PROMPT
VALID_SENTENCE = "You should try to find the most likely answer. "


def told_valid(question: str, ratio: float) -> bool:
    """Whether this question's prompt asks for the most likely answer (and its invalid answers are penalised)."""
    if ratio >= 1:
        return True
    if ratio <= 0:
        return False
    digest = hashlib.sha256(question.strip().encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < ratio


def instruct(prompt: str, valid: bool) -> str:
    """The prompt as this question is shown: ASearcher's INVALID sentence replaced when it is told valid."""
    return prompt.replace(INVALID_SENTENCE, VALID_SENTENCE) if valid else prompt
