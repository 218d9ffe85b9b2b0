"""ZeRO-3's coalesced all-gather on gloo: every gather finished before the parameters are used.

DeepSpeed 0.19.6 gathers the parameters of a module with several (a weight and its bias) by launching one
asynchronous all-gather each and waiting for the last handle only (`_allgather_params_coalesced` in
`runtime/zero/partition_parameters.py`: "Wait ensures the operation is enqueued, but not necessarily complete").
On a GPU that orders the earlier ones too: NCCL runs them in turn on one stream. gloo runs them on its own threads,
in no set order, so the first could still be writing when the parameter is used. When transformers loads a
checkpoint under ZeRO-3, rank 0 copies the weights into the gathered parameters and broadcasts them; a gather still
running then wrote the partitions' uninitialised memory over part of a weight: in 2 of 5 loads of the tiny model a
q/k/v projection weight (the modules with a bias) held values up to 1e36, which made every loss NaN in training.

DeepSpeed's own `stage3_allgather_sequential` gathers the parameters one at a time, each waited for; the harness
sets it in the DeepSpeed configs OpenRLHF builds (`get_train_ds_config`, `get_eval_ds_config`).
"""

from __future__ import annotations


def gather_in_order() -> None:
    """In a trainer process, before OpenRLHF builds a model (`actors.on_cpu`, `asearcher sft --cpu`); idempotent."""
    from .ds_configs import wrap_builders

    def sequential(real):
        def ds_config(*args, **kwargs):
            config = real(*args, **kwargs)
            config.setdefault("zero_optimization", {})["stage3_allgather_sequential"] = True
            return config

        return ds_config

    wrap_builders(sequential, "gather_in_order")
