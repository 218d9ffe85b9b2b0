"""Scoring answers: SQuAD-style EM/F1 and ASearcher's reward (reward.py), a reward function of the user's own
(reward_function.py), and the LLM judge with its prompt templates (judge.py, judge_templates/)."""
