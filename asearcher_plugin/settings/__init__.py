"""The run and agent configs: their schemas (config.py) and how files and `--set` are read (yamlio.py)."""
