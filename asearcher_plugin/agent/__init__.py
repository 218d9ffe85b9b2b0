"""Agent logic: action grammar, prompts per agent type."""
