"""The `asearcher` command."""

from __future__ import annotations

from enum import Enum
from importlib.metadata import entry_points

import typer

from local_retriever.options import deprecated, out_dir, split_list

from .commands.cli_help import show_flags_without_type

show_flags_without_type()
app = typer.Typer(help="Long-horizon search agents for OpenRLHF.", no_args_is_help=True)

# Other packages add their sub-commands (`kb` from local_retriever, `synth` from data_synth) through this
# entry-point group, so this package imports neither: dependencies point one way (see .importlinter).
COMMANDS_GROUP = "asearcher.commands"


def register_commands(root: typer.Typer, group: str = COMMANDS_GROUP) -> None:
    """Each entry point is a Typer app: one with a single command becomes that command, others a command group."""
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        sub = ep.load()
        single = len(sub.registered_commands) == 1 and not sub.registered_groups and sub.registered_callback is None
        if single:
            command = sub.registered_commands[0]
            root.command(ep.name, **{k: getattr(command, k) for k in ("help", "epilog", "hidden")})(command.callback)
        else:
            root.add_typer(sub, name=ep.name)


class LogLevel(str, Enum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


@app.callback()
def configure_logging(
    log_level: LogLevel = typer.Option(
        LogLevel.warning,
        "--log-level",
        case_sensitive=False,
        help="level of the log records shown on stderr (every sub-command)",
    ),
):
    import logging
    import sys

    from rich.console import Console
    from rich.logging import RichHandler

    # basicConfig leaves a root logger that something configured first alone; the level is set either way. Rich on a
    # terminal; elsewhere (a pipe, a log file, CI) one plain line per record, not wrapped at 80 columns.
    if sys.stderr.isatty():
        handler: logging.Handler = RichHandler(console=Console(stderr=True), show_path=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s", datefmt="[%X]"))
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%X"))
    logging.basicConfig(handlers=[handler])
    logging.getLogger().setLevel(log_level.value.upper())


@app.command()
def quickstart(
    out: str = typer.Option(None, "--out", help="where the KB, model, trajectories and report go [default: runs]"),
    legacy_dir: str = typer.Option(None, "--dir", hidden=True, help="deprecated spelling of --out"),
    port: int = typer.Option(5005, help="port of the knowledge-base server"),
    questions: int = typer.Option(20, help="built-in questions to evaluate"),
    k: int = typer.Option(2, help="runs per question"),
    base_url: list[str] = typer.Option(
        [],
        help="an OpenAI-compatible server for real answers, e.g. http://host:8000/v1; repeatable, or comma-separated",
    ),
    model: str = typer.Option("default", help="model name on that server"),
    tokenizer: str = typer.Option(None, help="tokenizer path for --base-url (defaults to --model)"),
    keep_serving: bool = typer.Option(
        False, "--keep-serving", help="leave the knowledge-base server up at the end, until Ctrl-C"
    ),
):
    """The whole path on CPU: sample KB served, tiny model, streaming rollout on Ray, evaluation, HTML report."""
    from pathlib import Path

    from rich.console import Console

    from asearcher_plugin.commands.quickstart import run_quickstart

    workdir = Path(out_dir(out, legacy_dir, "--dir", "runs"))
    from asearcher_plugin.eval.runner import ResumeRefused
    from local_retriever.server_process import PortInUse

    console = Console(stderr=True, soft_wrap=True)  # a line not cut at 80 columns in a pipe: paths are copied
    try:
        run_quickstart(workdir, port, questions, k, split_list(base_url), model, tokenizer, console, keep_serving)
    except PortInUse as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ResumeRefused as exc:  # a re-run with another --k or model into the same folder
        typer.echo(f"error: {ResumeRefused(exc.folder, exc.fields, 'remove that folder')}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command()
def train(
    recipe: str = typer.Argument(
        ...,
        help="a packaged recipe (cpu_tiny, local_7b_1node, local_7b_16nodes, "
        "local_7b_long, local_14b_2nodes, web_qwq32b) or a recipe YAML path",
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="override, e.g. openrlhf.rollout.batch_size=64 or agent.max_turns=16"
    ),
    print_cmd: bool = typer.Option(False, help="print the launcher and `ray job submit` commands and exit"),
    dry_run: bool = typer.Option(
        False, help="check the recipe and the flags with OpenRLHF's own parser and asserts, then exit"
    ),
    cpu: bool = typer.Option(
        False,
        help="OpenRLHF's real training without a GPU: vLLM's CPU build and DeepSpeed's CPU accelerator, CUDA "
        "calls redirected (asearcher_plugin.openrlhf.cpu; needs the cpu-harness extra)",
    ),
):
    """Train with OpenRLHF from a recipe: agent and scheduler config travel with the run in Ray's runtime env."""
    import shlex

    from asearcher_plugin.launch import LaunchError, ray_job_command, rollout_failure, run_openrlhf
    from asearcher_plugin.openrlhf.args import RecipeFlagError
    from asearcher_plugin.recipe import Recipe, RecipeError

    try:
        model = Recipe.load(recipe, set_)
        argv, config = model.argv(), model.run_config()
        if print_cmd:
            typer.echo(
                f"ASEARCHER_RUN_CONFIG={shlex.quote(config.model_dump_json())} python -m asearcher_plugin.launch "
                + shlex.join(argv)
            )
            typer.echo(ray_job_command(argv, config))
            return
        checked = model.check()
        fit = checked.fit()
        if dry_run:
            typer.echo(checked.summary())
            if not fit.problems:
                typer.echo(f"{model.source}: {len(argv)} arguments accepted by OpenRLHF's parser and checks")
        else:
            for warning in fit.warnings:
                typer.echo(f"warning: {recipe}: {warning}", err=True)
        if fit.problems:  # before anything starts: OpenRLHF would wait on a placement group or fail at load
            typer.echo(f"error: {recipe}: does not fit: " + "; ".join(fit.problems), err=True)
            raise typer.Exit(2)
        if dry_run:
            return
    except RecipeError as exc:  # names the file and the field
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except LaunchError as exc:
        typer.echo(f"error: {recipe}: {exc}", err=True)
        raise typer.Exit(2) from None
    if cpu:  # before the tiny model is built: a missing extra is one line, not a model written first
        from asearcher_plugin.openrlhf.cpu import HarnessMissing, check_installed

        try:
            check_installed()
        except HarnessMissing as exc:
            typer.echo(f"error: {recipe}: {exc}", err=True)
            raise typer.Exit(2) from None
    from asearcher_plugin.commands.local_inputs import make_local_inputs, missing_local_paths

    make_local_inputs(model.openrlhf.get("actor.model_name_or_path"), model.openrlhf.get("data.prompt_dataset"))
    inputs = ("actor.model_name_or_path", "data.prompt_dataset", "eval.dataset")  # OpenRLHF 0.11.2's flags
    named = {f"openrlhf.{f}": v for f in inputs if isinstance(v := model.openrlhf.get(f), str)}
    if problems := missing_local_paths(named):
        typer.echo(f"error: {recipe}: " + "; ".join(problems) + " (checked before anything starts)", err=True)
        raise typer.Exit(2)
    try:
        run_openrlhf(argv, config, cpu=cpu)
    except (RecipeFlagError, LaunchError) as exc:  # refused before any actor starts
        typer.echo(f"error: {recipe}: {exc}", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:
        if (fatal := rollout_failure(exc)) is None:
            raise
        typer.echo(f"error: {recipe}: {fatal}", err=True)  # the run's own reason, not Ray's wrapped traceback
        raise typer.Exit(1) from None


@app.command()
def rollout(
    recipe: str = typer.Argument(..., help="a packaged recipe name or a recipe YAML; cpu_tiny runs on any laptop"),
    out: str = typer.Option("runs/rollout", help="output folder; trajectories.jsonl is written there"),
    engines: int = typer.Option(2, help="CPU engine actors on Ray"),
    steps: int = typer.Option(3, help="batches to hand out"),
    set_: list[str] = typer.Option([], "--set", help="recipe override, as for `asearcher train`"),
):
    """Run the streaming scheduler with in-process engines on Ray, without training; write trajectories."""
    import asyncio
    import json
    from pathlib import Path

    import ray

    from asearcher_plugin.commands.rollout import RolloutFlags, load_prompts
    from asearcher_plugin.commands.rollout import rollout as run
    from asearcher_plugin.recipe import Recipe, RecipeError

    try:
        r = Recipe.load(recipe, set_)
        flags = RolloutFlags.of(r.openrlhf, r.source)
    except (RecipeError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from asearcher_plugin.commands.local_inputs import MissingInput, ensure_local_inputs

    model, data = flags.model, flags.prompt_dataset
    if out.endswith(".jsonl"):  # the old `--out FILE`
        deprecated("--out FILE.jsonl", "--out DIR (trajectories.jsonl is written there)")
        out_file = Path(out)
    else:
        out_file = Path(out) / "trajectories.jsonl"
    try:
        ensure_local_inputs(model, data)
    except MissingInput as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    prompts = load_prompts(data, flags.input_key, flags.label_key)
    from asearcher_plugin.scheduler import FatalRolloutError

    ray.init(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        result = asyncio.run(
            run(
                str(model),
                r.agent,
                prompts,
                out_file,
                engines,
                flags.batch_size,
                flags.n_samples,
                steps,
                r.scheduler,
                flags.max_len,
                flags.temperature,
            )
        )
    except KeyboardInterrupt:
        typer.echo(f"interrupted: engines stopped; trajectories so far are in {out_file}", err=True)
        raise typer.Exit(130) from None
    except FatalRolloutError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        ray.shutdown()
    typer.echo(json.dumps(result))
    typer.echo(f"trajectories written to {out_file}")


def _eval_commands() -> typer.Typer:
    from asearcher_plugin.commands.eval_cli import eval_app

    return eval_app


app.add_typer(_eval_commands(), name="eval")


def _sft_commands() -> None:
    from asearcher_plugin.sft.cli import sft, sft_data

    app.command("sft-data")(sft_data)
    app.command("sft")(sft)


_sft_commands()


def _tool_command() -> None:
    from asearcher_plugin.tools.try_tool import tool

    app.command("tool")(tool)


_tool_command()


@app.command("make-tiny-model")
def make_tiny_model_cmd(
    out: str = typer.Option(None, "--out", help="folder to write the model and tokenizer to"),
    legacy_out: str = typer.Argument(None, hidden=True, help="deprecated: the folder as a positional"),
    seed: int = typer.Option(0, help="weight initialisation seed"),
    layers: int = typer.Option(2, min=1, help="decoder layers (the decision task's student has 4)"),
):
    """A tiny random Qwen2-architecture model with a tokenizer trained on the bundled sample (no hub needed)."""
    from asearcher_plugin.engines.tiny_model import make_tiny_model

    path = make_tiny_model(out_dir(out, legacy_out, "the positional output folder"), seed=seed, layers=layers)
    typer.echo(str(path))


@app.command()
def demo(
    host: str = typer.Option(
        "127.0.0.1", help="address to bind; anything but loopback lets others with the URL use your servers and keys"
    ),
    port: int = typer.Option(8000, help="port of the page"),
    kb_url: list[str] = typer.Option(
        ["http://127.0.0.1:5005"],
        "--kb-url",
        help="a knowledge base runs may use (repeat for several; the first is the default); no other is reached",
    ),
    model_url: list[str] = typer.Option(
        [],
        "--model-url",
        help="an OpenAI-compatible server runs may use, with $OPENAI_API_KEY (repeat for several; "
        "$OPENAI_BASE_URL is added); no other gets a request",
    ),
    allow_host: list[str] = typer.Option(
        [], "--allow-host", help="a Host name the page is served under besides loopback ones (e.g. a proxy's name)"
    ),
    tiny_model: str = typer.Option(
        "runs/tiny-model", "--tiny-model", help="folder of the tiny CPU model (made there on first use)"
    ),
):
    """A web page: ask a question, watch the agent search, read and answer turn by turn; replay eval trajectories."""
    from local_retriever.server_process import PortInUse, check_port_free

    try:
        check_port_free(host, port)  # before the page's start-up, not after its "serving" line
    except PortInUse as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from asearcher_plugin.demo.server import serve

    serve(host, port, kb_url, tiny_model, tuple(model_url), tuple(allow_host))


register_commands(app)

# Modules that only an extra installs: a command that reaches one without it says which extra, in one line.
EXTRA_MODULES = {"openrlhf": "train", "vllm": "train", "deepspeed": "train", "flash_attn": "train"}


def main() -> None:
    """The `asearcher` console script."""
    try:
        app()
    except SystemExit as exc:
        from asearcher_plugin.openrlhf.run_end import leave_after_run

        leave_after_run(exc.code)  # returns unless a run ended here
        raise
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in EXTRA_MODULES:
            raise
        extra = EXTRA_MODULES[top]
        how = f"it comes with the [{extra}] extra: pip install 'asearcher-plugin[{extra}]'"
        if top == "flash_attn":  # built against the installed torch, so not in the extra (setup.py)
            how = "after the [train] extra: pip install flash-attn --no-build-isolation"
        typer.echo(f"error: {top} is not installed; {how}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
