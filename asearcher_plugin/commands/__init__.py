"""The `asearcher` sub-commands that are more than a call into a package: eval, quickstart, rollout, and their
helpers (the quickstart's local inputs, the help text)."""
