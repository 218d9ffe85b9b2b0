"""Reading the project's YAML files (recipes, agent, run and synthesis configs) in one strict way.

PyYAML alone keeps the last of two equal keys in a mapping, so a recipe that sets `max_turns` twice
trains with whichever came last without a word; here that is an error naming the key and both
lines. A file that is not UTF-8 or not YAML gives a one-line error naming the file (and the line),
not a traceback. The helpers below read a config file's top-level mapping and apply `--set key=value`
overrides; each takes the error type its caller reports with.
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


def read_yaml_mapping(
    path: str | os.PathLike, error: type[Exception] = YamlInputError, label: str | None = None
) -> dict:
    """A YAML file whose top level is a mapping; otherwise `error`, naming the file and the problem."""
    p = Path(path)
    if not p.is_file():
        raise error(f"{label or path}: file not found")
    try:
        data = read_yaml(p)
    except YamlInputError as exc:
        raise error(str(exc)) from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise error(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def parse_assignment(item: str, error: type[Exception] = YamlInputError) -> tuple[str, object]:
    """`--set key=value` as (key, value); the value is YAML, so `k=4` gives an int and `urls=[a, b]` a list."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise error(f"--set expects key=value, got {item!r}")
    try:
        return key, load_yaml(raw, f"--set {key}")
    except YamlInputError as exc:
        raise error(str(exc)) from None


def null_sections(data: dict, path, names=("agent", "scheduler")) -> list[str]:
    """Sections written but left empty (`agent:` with nothing under it, or `agent: null`).

    Refused rather than read as defaults: an empty section is most often one whose fields lost their
    indentation or were commented out, and training with default settings would go unnoticed.
    `agent: {}` asks for the defaults explicitly.
    """
    return [
        f"{path}: `{name}:` is empty (null); give its fields, write `{name}: {{}}` for the defaults, or remove it"
        for name in names
        if name in data and data[name] is None
    ]


def set_dotted(node: dict, key: str, value, error: type[Exception] = YamlInputError) -> None:
    """`node["a"]["b"] = value` for key `a.b`, creating sections on the way."""
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise error(f"--set {key}: {part} is not a section")
    node[parts[-1]] = value
