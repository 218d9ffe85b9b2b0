"""`module:attribute` references in the config (`reward.function`, `tools.extra`): found by import, or a one-line
error naming the setting, the reference and what was wrong."""

from __future__ import annotations

import importlib


def resolve_reference(spec: str, setting: str, example: str, error: type[Exception]):
    """The object `spec` (`module:attr.attr`) names; raises `error` with `setting` and `spec` in its message."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise error(f"{setting} {spec!r}: expected 'module:callable', e.g. {example!r}")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        hint = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]:
            # the `asearcher` console script does not import from the folder it runs in, nor do Ray's workers
            hint = " (is its folder on PYTHONPATH? e.g. PYTHONPATH=. asearcher ...)"
        raise error(f"{setting} {spec!r}: cannot import module {module_name!r}: {exc}{hint}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise error(f"{setting} {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj
