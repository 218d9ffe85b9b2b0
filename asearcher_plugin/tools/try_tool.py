"""`asearcher tool SPEC --call JSON`: a function of your own as the agent will offer it and call it, before a run."""

from __future__ import annotations

import asyncio
import json
import traceback

import typer


def tool(
    spec: str = typer.Argument(..., help="the function, as tools.extra names it: module:callable"),
    call: str = typer.Option(None, "--call", help='arguments as a JSON object, e.g. \'{"expression": "6 * 7"}\''),
    deadline: float = typer.Option(60.0, help="seconds the call may take (tools.call_deadline)"),
):
    """Print the schema the model is shown for a tools.extra function; with --call, call it as the agent does."""
    from asearcher_plugin.tools.base import EXPECTED_FAILURES, failure_shown
    from asearcher_plugin.tools.registry import BadToolCall, ToolSpecError, resolve_extra

    try:
        arguments = None if call is None else json.loads(call)
    except json.JSONDecodeError as exc:
        typer.echo(f"error: --call is not JSON: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        found = resolve_extra(spec)
    except ToolSpecError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(found.schema(), indent=2))
    if arguments is None:
        return
    typer.echo(f"call: {json.dumps({'name': found.name, 'arguments': arguments})}")
    try:
        result = asyncio.run(found.call(arguments, deadline))
    except BadToolCall as exc:  # what the agent answers a call that does not fit the schema
        typer.echo(f"the model is told: Error: {exc}")
        raise typer.Exit(1) from None
    except Exception as exc:  # noqa: BLE001 - as the agent's ladder (agent/instance.py) shows and counts it
        if not isinstance(exc, EXPECTED_FAILURES):
            traceback.print_exc()  # the model sees the type only; you see the traceback
        text, infra = failure_shown(found.name, exc)
        counted = "a tool error of the infrastructure's" if infra else "a tool error"
        typer.echo(f"the model is told: {text} (counted as {counted})")
        raise typer.Exit(1) from None
    typer.echo(f"the model is told:\n{result}")
