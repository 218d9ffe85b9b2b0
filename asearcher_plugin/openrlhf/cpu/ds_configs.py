"""The DeepSpeed configs OpenRLHF builds (`openrlhf/utils/deepspeed/deepspeed_utils.py`), edited by the harness's
shims in a trainer process: float32 (`precision`), torch's AdamW (`deepspeed_ops`), ordered ZeRO-3 gathers
(`gloo_gathers`)."""

from __future__ import annotations

from collections.abc import Callable

BUILDERS = ("get_train_ds_config", "get_eval_ds_config")


def wrap_builders(wrap: Callable, tag: str, names: tuple[str, ...] = BUILDERS) -> None:
    """Each builder in `names` replaced by `wrap(builder)`, in `deepspeed_utils` and where `DeepspeedStrategy` looks
    it up (it calls the names it imported); once per `tag`, so a second call changes nothing."""
    from openrlhf.utils.deepspeed import deepspeed as strategy
    from openrlhf.utils.deepspeed import deepspeed_utils

    for name in names:
        real = getattr(deepspeed_utils, name)
        if tag in getattr(real, "harness_shims", ()):
            continue
        builder = wrap(real)
        builder.harness_shims = (*getattr(real, "harness_shims", ()), tag)
        setattr(deepspeed_utils, name, builder)
        setattr(strategy, name, builder)
