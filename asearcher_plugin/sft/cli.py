"""`asearcher sft-data` and `asearcher sft`: the warm start before RL."""

from __future__ import annotations

import typer


def sft_data(
    trajectories: list[str] = typer.Argument(
        ..., help="trajectories.jsonl files of `asearcher eval` or `asearcher rollout`, or the folders holding them"
    ),
    out: str = typer.Option("runs/sft-data", "--out", help="folder for train.jsonl, heldout.jsonl, manifest.json"),
    min_reward: float = typer.Option(1.0, help="keep trajectories whose reward is at least this"),
    best_of: int = typer.Option(
        None, help="then keep only the best N of each question (rejection sampling: best-of-k) [default: all]"
    ),
    heldout: float = typer.Option(0.1, help="fraction of the questions held out (split by question, never by row)"),
    split_salt: str = typer.Option("", help="changes which questions are held out"),
    max_len: int = typer.Option(None, help="drop sequences longer than this (the SFT recipe's data.max_len)"),
    keep_truncated: bool = typer.Option(False, help="keep trajectories that ran out of tokens before answering"),
):
    """A token-exact SFT dataset from a teacher's trajectories: one row per training sequence with the ids the engine
    saw and produced and a 0/1 loss mask on the model's own tokens (prompt, tool results and pages masked)."""
    from .data import SFTDataError, build, render

    try:
        manifest = build(trajectories, out, min_reward, best_of, heldout, split_salt, max_len, keep_truncated)
    except SFTDataError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(render(manifest))
    for problem in manifest["rows_unreadable"][:20]:
        typer.echo(f"error: {problem} (row skipped)", err=True)
    if len(manifest["rows_unreadable"]) > 20:
        typer.echo(f"error: ... and {len(manifest['rows_unreadable']) - 20} more rows skipped", err=True)
    if manifest["rows_unreadable"]:
        typer.echo("the readable rows were written; fix or drop the rows above and run again", err=True)
        raise typer.Exit(2)
    if not manifest["sequences_written"].get("train"):
        typer.echo("error: no training sequence was kept (see the reasons above)", err=True)
        raise typer.Exit(1)


def sft(
    recipe: str = typer.Argument(..., help="a recipe YAML with an `sft:` section (OpenRLHF train_sft flags)"),
    set_: list[str] = typer.Option([], "--set", help="override, e.g. sft.train.max_epochs=4"),
    cpu: bool = typer.Option(
        False, help="in this process on DeepSpeed's CPU accelerator, CUDA calls redirected (as `train --cpu`)"
    ),
    cpu_float32: bool = typer.Option(
        False,
        help="with --cpu: compute in float32 where OpenRLHF asks for bf16 (a CPU without bf16 units emulates bf16, "
        "an order of magnitude slower); what a small model learns may differ",
    ),
    print_cmd: bool = typer.Option(False, help="print the command (`deepspeed --module ...` on GPUs) and exit"),
):
    """OpenRLHF 0.11.2's own SFT trainer on an `asearcher sft-data` dataset (its ids and masks as they are); the
    model it writes to sft's ckpt.output_dir is what the recipe's RL (`openrlhf.actor.model_name_or_path`) starts
    from."""
    import shlex
    import sys

    from asearcher_plugin.recipe import Recipe, RecipeError, openrlhf_argv

    from .train import SFTRunError, run

    try:
        model = Recipe.load(recipe, set_)
    except RecipeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not model.sft:
        typer.echo(f"error: {model.source}: no `sft:` section (the train_sft flags)", err=True)
        raise typer.Exit(2)
    argv = openrlhf_argv(model.sft)
    if print_cmd:
        launcher = [sys.executable, "-m"] if cpu else ["deepspeed", "--module"]
        flags = [*(["--cpu"] if cpu else []), *(["--cpu-float32"] if cpu and cpu_float32 else [])]
        typer.echo(shlex.join([*launcher, "asearcher_plugin.sft.train", *argv, *flags]))
        return
    try:
        run(argv, cpu=cpu, float32=cpu_float32)
    except SFTRunError as exc:
        typer.echo(f"error: {model.source}: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"model written to {model.sft.get('ckpt.output_dir', './ckpt')}")
