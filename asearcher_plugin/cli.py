"""The `asearcher` command."""

from __future__ import annotations

import typer

from local_retriever.cli import app as kb_app
from local_retriever.cli import quickstart as kb_quickstart

app = typer.Typer(help="Long-horizon search agents for OpenRLHF.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")
app.command("quickstart", help="Run the whole local path end to end (today: the sample knowledge base).")(kb_quickstart)

@app.command()
def train(
    recipe: str = typer.Argument(..., help="recipe YAML (see recipes/)"),
    set_: list[str] = typer.Option([], "--set", help="override, e.g. openrlhf.rollout.batch_size=64 or agent.max_turns=16"),
    print_cmd: bool = typer.Option(False, help="print the OpenRLHF and `ray job submit` commands and exit"),
    dry_run: bool = typer.Option(False, help="check the flags with OpenRLHF's own parser and asserts, then exit"),
    run_dir: str = typer.Option("runs/train", help="where the agent config is written"),
):
    """Train with OpenRLHF from a recipe: the agent config is written and named by $ASEARCHER_CONFIG."""
    from pathlib import Path

    from asearcher_plugin.launch import build_command, ray_job_command, run_openrlhf
    from asearcher_plugin.openrlhf_args import RecipeFlagError, check_args
    from asearcher_plugin.recipe import RecipeError

    try:
        argv, env = build_command(recipe, set_, Path(run_dir))
    except RecipeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if print_cmd:
        typer.echo(" ".join(f"{k}={v}" for k, v in env.items()) + " python -m openrlhf.cli.train_ppo_ray " + " ".join(argv))
        typer.echo(ray_job_command(argv, env))
        return
    if dry_run:
        try:
            check_args(argv)
        except RecipeFlagError as exc:
            typer.echo(f"error: {recipe}: {exc}", err=True)
            raise typer.Exit(2)
        typer.echo(f"{recipe}: {len(argv)} arguments accepted by OpenRLHF's parser and checks")
        return
    run_openrlhf(argv, env)


@app.command("make-tiny-model")
def make_tiny_model_cmd(
    out_dir: str = typer.Argument(..., help="folder to write the model and tokenizer to"),
    seed: int = typer.Option(0, help="weight initialisation seed"),
):
    """A tiny random Qwen2-architecture model with a tokenizer trained on the bundled sample (no hub needed)."""
    from asearcher_plugin.engines.tiny_model import make_tiny_model

    path = make_tiny_model(out_dir, seed=seed)
    typer.echo(str(path))


if __name__ == "__main__":
    app()
