"""Small helpers every room uses, none of which knows the agent: dotted names, text, JSONL, the disk cache, template
checks and the settings schemas' base."""
