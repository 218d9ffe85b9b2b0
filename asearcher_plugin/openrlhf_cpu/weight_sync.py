"""The trainer -> engines weight broadcast of OpenRLHF, over gloo on CPU instead of NCCL.

Rank 0 is the policy actor, engine i is rank i + 1, as in `ActorPPOTrainer._init_vllm_sync_group`.
A stateless group (its own TCP store) so it never touches a process's default group.
"""

from __future__ import annotations

from datetime import timedelta


def join_group(master_address: str, master_port: int, rank: int, world_size: int):
    import torch.distributed as dist

    store = dist.TCPStore(
        master_address, int(master_port), world_size, is_master=rank == 0, timeout=timedelta(seconds=120)
    )
    return dist.ProcessGroupGloo(store, rank, world_size, timedelta(seconds=120))
