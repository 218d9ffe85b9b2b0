"""Rewards a tiny random model can learn in minutes on a CPU: for checking that a training set-up learns at all.

Use with any recipe:

    asearcher train cpu_tiny --cpu --set agent.reward.function=asearcher_plugin.openrlhf.cpu.learnable:brevity

The reward must separate the samples of one prompt from the first step on: a group whose rewards are all equal has no
advantage to learn from. Counting generated tokens alone does not: a random model rarely ends its turn early (its stop
tokens, EOS and the closing action tags, are 4 of ~4,100), so nearly every trajectory uses the whole token budget and
earns the same reward, and whether learning starts at all depends on the few that stop by chance. Characters do: the
tokens of a trajectory differ in length (1 to ~15 characters), so samples differ from the first step, and the policy
can earn more both by choosing shorter tokens and by stopping early. Either way the reward rises only if updates
reach the engines that generate.
"""

from __future__ import annotations


def brevity(question, answer, label, counters) -> float:
    """1 - generated characters / 1024 (at least 0): 1 for an empty trajectory; a random tiny model starts near 0.4
    (128 tokens of ~5 characters). Linear, so every character saved counts the same from the first step on."""
    return max(0.0, 1.0 - counters["generated_chars"] / 1024)
