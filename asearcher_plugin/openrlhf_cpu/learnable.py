"""Rewards a tiny random model can learn in minutes on a CPU: for checking that a training set-up learns at all.

Use with any recipe:

    asearcher train cpu_tiny --cpu --set agent.reward.function=asearcher_plugin.openrlhf_cpu.learnable:brevity

A random model rarely ends its turn early (its stop tokens, EOS and the closing action tags, are 4 of ~4,100), so a
reward for short trajectories starts near its floor and rises only if updates reach the engines that generate.
"""

from __future__ import annotations


def brevity(question, answer, label, counters) -> float:
    """1 for a trajectory of no tokens, 0.5 at 32 generated tokens, 0.2 at 128 (cpu_tiny's whole budget)."""
    return 32 / (32 + counters["generated_tokens"])
