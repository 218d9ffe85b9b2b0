"""The `asearcher` command."""

from __future__ import annotations

import typer

from local_retriever.cli import app as kb_app
from local_retriever.cli import quickstart as kb_quickstart

app = typer.Typer(help="Long-horizon search agents for OpenRLHF.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")
app.command("quickstart", help="Run the whole local path end to end (today: the sample knowledge base).")(kb_quickstart)

if __name__ == "__main__":
    app()
