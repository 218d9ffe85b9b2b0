"""`asearcher sft RECIPE`: OpenRLHF 0.11.2's own SFT command (`openrlhf.cli.train_sft`: its parser, `train()`,
`Actor`, `DeepspeedStrategy`, `SFTTrainer`, `save_model`) on an `asearcher sft-data` dataset.

Two names are replaced in OpenRLHF's modules before its command runs, and nothing else: `SFTDataset` by
`TokenSFTDataset` (the rows' ids and masks as they are) and `blending_datasets` by a reader of those JSONL rows
(`asearcher_plugin.openrlhf.commands`, where OpenRLHF is touched).
`python -m asearcher_plugin.sft.train FLAGS` is the command itself (under `deepspeed --module` on GPUs); with
`--cpu` it runs in one process on DeepSpeed's CPU accelerator, with the same CUDA redirections as `asearcher train
--cpu` (asearcher_plugin.openrlhf.cpu).
"""

from __future__ import annotations

import os
import socket
import sys

from ..openrlhf.commands import SFT, run_command, use_sft_dataset
from ..openrlhf.run_end import note_run_ended
from .dataset import TokenSFTDataset, read_rows

CPU_FLAG = "--cpu"
FLOAT32_FLAG = "--cpu-float32"


class SFTRunError(ValueError):
    pass


def blend(datasets: str, probabilities=None, strategy=None, seed=42, max_count=None, **_):
    """`blending_datasets` for token rows: the files concatenated, in order (OpenRLHF's sampler shuffles)."""
    if probabilities:
        raise SFTRunError("--data.dataset_probs: token datasets are concatenated; write one file per mixture")
    rows = read_rows(datasets)
    return rows if max_count is None else rows.select(range(min(int(max_count), len(rows))))


def check_flags(argv: list[str], cpu: bool) -> None:
    """What this command cannot do with token rows, or on a CPU, refused before anything loads."""
    refused = {
        "--data.apply_chat_template": "token rows are already templated and tokenised",
        "--data.multiturn": "token rows carry their own loss mask",
        "--model.pretrain_mode_enable": "token rows carry their own loss mask",
    }
    if cpu:
        refused["--ds.packing_samples"] = "needs flash-attn (CUDA)"
    problems = [f"{flag} ({why})" for flag, why in refused.items() if flag in argv]
    if "--data.dataset" not in argv:
        problems.append("--data.dataset (the train.jsonl of `asearcher sft-data`) is required")
    if cpu and "--ds.attn_implementation" in argv:
        impl = argv[argv.index("--ds.attn_implementation") + 1]
        if "flash" in impl:
            problems.append(f"--ds.attn_implementation {impl} (flash-attn needs CUDA; use sdpa)")
    elif cpu:
        problems.append("--ds.attn_implementation: set it to sdpa (OpenRLHF's default is flash_attention_2)")
    if problems:
        raise SFTRunError("cannot run: " + "; ".join(problems))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_cpu() -> None:
    """One process, world size 1, DeepSpeed's CPU accelerator; OpenRLHF's CUDA calls pointed at the CPU."""
    from asearcher_plugin.openrlhf.cpu import check_installed, use_stand_ins

    use_stand_ins()
    check_installed()
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    from asearcher_plugin.openrlhf.cpu.deepspeed_ops import skip_jit_ops
    from asearcher_plugin.openrlhf.cpu.device_shims import install
    from asearcher_plugin.openrlhf.cpu.gloo_gathers import gather_in_order

    install()
    skip_jit_ops()
    gather_in_order()


def run(argv: list[str], cpu: bool = False, float32: bool = False) -> None:
    """OpenRLHF's `train_sft` command with `argv`, as `python -m openrlhf.cli.train_sft` would run it.

    `float32` (with `cpu`): bf16 computes in float32 (`asearcher_plugin/openrlhf/cpu/precision.py`)."""
    check_flags(argv, cpu)
    if float32 and not cpu:
        raise SFTRunError(f"{FLOAT32_FLAG} needs --cpu")
    if cpu:
        use_cpu()
    if float32:
        from asearcher_plugin.openrlhf.cpu.precision import train_in_fp32

        train_in_fp32()
    use_sft_dataset(TokenSFTDataset, blend)
    run_command(SFT, argv)
    note_run_ended()


def main() -> None:
    argv = sys.argv[1:]
    cpu, float32 = CPU_FLAG in argv, FLOAT32_FLAG in argv
    try:
        run([a for a in argv if a not in (CPU_FLAG, FLOAT32_FLAG)], cpu=cpu, float32=float32)
    except SFTRunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
