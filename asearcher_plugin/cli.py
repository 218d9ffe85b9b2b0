"""The `asearcher` command."""

from __future__ import annotations

import typer

from local_retriever.cli import app as kb_app
from local_retriever.cli import quickstart as kb_quickstart

app = typer.Typer(help="Long-horizon search agents for OpenRLHF.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")
app.command("quickstart", help="Run the whole local path end to end (today: the sample knowledge base).")(kb_quickstart)

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
