"""Supervised warm start from a teacher's trajectories: `asearcher sft-data` (rejection sampling into a token-exact
dataset, `data`) and `asearcher sft` (OpenRLHF 0.11.2's own SFT trainer on it, `dataset` and `train`)."""
