"""QA synthesis agent."""
