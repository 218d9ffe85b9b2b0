"""Reading the project's YAML files (recipes, agent, run and synthesis configs) in one strict way.

PyYAML alone keeps the last of two equal keys in a mapping, so a recipe that sets `max_turns` twice
trains with whichever came last without a word; here that is an error naming the key and both
lines. A file that is not UTF-8 or not YAML gives a one-line error naming the file (and the line),
not a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml


class YamlInputError(ValueError):
    pass


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.message, self.line = message, line


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping holding the same key twice (merge keys `<<` may still be overridden)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise _DuplicateKey(f"duplicate key {key!r} (lines {first} and {line})", line)
                seen[key] = line
        return super().construct_mapping(node, deep)


def load_yaml(text: str, source: str = "<string>"):
    """Parses one YAML document; errors are `YamlInputError` as `source:line:col: problem`."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except _DuplicateKey as exc:
        raise YamlInputError(f"{source}:{exc.line}: {exc.message}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = "; ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
        raise YamlInputError(f"{where}: not valid YAML: {problem or exc}") from None


def read_yaml(path: str | os.PathLike):
    """The YAML document in the file at `path`, which must be UTF-8 text."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise YamlInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise YamlInputError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from None
    return load_yaml(text, str(path))
