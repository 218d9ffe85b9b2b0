"""`asearcher eval` (evaluate, or repeat an earlier run with `--like`) and `asearcher eval compare A B`."""

from __future__ import annotations

import typer

from local_retriever.options import split_list

eval_app = typer.Typer(
    help="Evaluate an agent: Avg@k / Pass@k with EM, F1, cover-EM, substring (and the judge if configured); "
    "`asearcher eval compare A B` compares two runs.",
    invoke_without_command=True,
    subcommand_metavar="[compare RUN_A RUN_B]",  # eval runs without a sub-command; `compare` is the only one
)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


@eval_app.callback()
def eval_cmd(
    ctx: typer.Context,
    dataset: list[str] = typer.Option(
        None,
        "--dataset",
        help="built-in name (sample) or JSONL/JSON/Parquet path; "
        "repeatable (default: sample, unless --data-dir is given)",
    ),
    data_dir: str = typer.Option(
        None,
        "--data-dir",
        "--data_dir",
        help="ASearcher's layout: DIR/NAME/{split}.jsonl or .json, one folder per dataset",
    ),
    data_names: list[str] = typer.Option(
        [],
        "--data-names",
        "--data_names",
        help="with --data-dir: folder names, e.g. GAIA,Frames; repeatable, or comma-separated",
    ),
    split: str = typer.Option("test", help="with --data-dir: the file name inside each dataset folder"),
    out: str = typer.Option(
        "runs/eval", help="output folder (re-running resumes it; a folder holding other settings is refused)"
    ),
    other_settings: bool = typer.Option(
        False,
        "--resume-other-settings",
        help="add to a folder whose run had other settings (its metrics then mix both)",
    ),
    k: int = typer.Option(1, help="runs per question (seeds 0..k-1): Avg@k and Pass@k"),
    hf_model: str = typer.Option(None, help="evaluate an in-process transformers model (CPU or GPU)"),
    base_url: list[str] = typer.Option(
        [], help="OpenAI-compatible server URL, e.g. http://host:8000/v1; repeatable, or comma-separated"
    ),
    model: str = typer.Option("default", help="model name on the server"),
    tokenizer: str = typer.Option(
        None,
        help="tokenizer path for --base-url (defaults to --model) or for the scripted reference policy "
        "(defaults to the tiny model's, made in runs/tiny-model if absent)",
    ),
    reference_policy: bool = typer.Option(
        False,
        "--scripted-reference-policy",
        help="answer with the scripted reference policy instead of a model: it searches for the question, reads "
        "the top page and answers from it, a quarter of answers wrong on purpose (see docs/reference-policy.md)",
    ),
    like: str = typer.Option(
        None,
        "--like",
        help="an earlier run's metrics.json (or folder): repeat it with the settings its eval card records; "
        "options given here replace them, and what cannot be matched is named before the run starts. A card never "
        "sets code, processes, endpoints or key variables: give the model (--hf-model / --base-url) and --kb-url",
    ),
    agent_config: str = typer.Option(None, help="agent YAML (else $ASEARCHER_CONFIG, else defaults)"),
    kb_url: list[str] = typer.Option(
        [], help="knowledge-base server URL, overriding the agent config; repeatable, or comma-separated"
    ),
    set_: list[str] = typer.Option(
        [],
        "--set",
        help="override the agent config, as for `asearcher train`: "
        "agent.max_turns=16, agent.tools.topk=5 (values are YAML)",
    ),
    concurrency: int = typer.Option(8, help="trajectories in flight"),
    max_length: int = typer.Option(8192, help="token budget per trajectory"),
    temperature: float = typer.Option(0.6, help="sampling temperature"),
    top_p: float = typer.Option(0.95, help="nucleus sampling threshold"),
    limit: int = typer.Option(None, help="questions per dataset"),
    question_key: str = typer.Option(None, help="dataset field holding the question [default: question]"),
    answer_key: str = typer.Option(None, help="dataset field holding the gold answers [default: golden_answers]"),
):
    """Evaluate an agent: Avg@k / Pass@k with EM, F1, cover-EM, substring (and the judge if configured)."""
    if ctx.invoked_subcommand:
        return
    import asyncio
    from pathlib import Path

    from asearcher_plugin.eval.datasets import DatasetError, asearcher_layout, load_datasets, plan_datasets
    from asearcher_plugin.eval.like import LikeError, load_like, unmatched
    from asearcher_plugin.eval.runner import ResumeRefused, run_eval
    from asearcher_plugin.settings.config import ConfigError, load_config, override_agent_config

    def given(name: str) -> bool:  # by name: typer may carry its own copy of click's enum
        return getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"

    base_urls, names = split_list(base_url), ",".join(split_list(data_names))
    if bool(data_dir) != bool(names):
        raise _fail("--data-dir and --data-names go together")
    engines = [
        name
        for name, on in (
            ("--hf-model", hf_model),
            ("--base-url", base_urls),
            ("--scripted-reference-policy", reference_policy),
        )
        if on
    ]
    if len(engines) > 1 or (not engines and not like):
        raise _fail("give exactly one of --hf-model, --base-url or --scripted-reference-policy (or --like RUN)")
    try:
        # a card's code, endpoints and key variables are never used: this machine's config and --kb-url set them
        earlier = None
        if like:
            here = load_config(None)
            if kb_url:
                here.tools.local.urls = split_list(kb_url)
            earlier = load_like(like, here)
        if earlier is not None and not (given("agent_config") or given("set_")):
            config = earlier.config
        else:
            config = override_agent_config(load_config(agent_config), set_)
        if earlier is not None:
            k = k if given("k") else earlier.k
            temperature = temperature if given("temperature") else earlier.temperature
            top_p = top_p if given("top_p") else earlier.top_p
            max_length = max_length if given("max_length") else earlier.max_length
            question_key = question_key if given("question_key") else earlier.question_key
            answer_key = answer_key if given("answer_key") else earlier.answer_key
            limit = limit if given("limit") else earlier.limit
        named = asearcher_layout(data_dir, names, split) if data_dir else []
        if earlier is not None and not (dataset or named):
            specs, named = earlier.datasets, earlier.named
        else:
            specs = dataset or ([] if named else ["sample"])
        items = load_datasets(specs, question_key, answer_key, limit, named)
        sources = {name: (path, positional) for path, name, positional in plan_datasets(specs, named)}
    except (ConfigError, DatasetError, LikeError) as exc:
        raise _fail(str(exc)) from None
    if kb_url:
        config.tools.local.urls = split_list(kb_url)
    try:
        engine, tok = _engine(config, items, hf_model, base_urls, model, tokenizer, reference_policy, earlier)
    except LikeError as exc:
        raise _fail(str(exc)) from None
    if earlier is not None:
        from asearcher_plugin.eval.card import build_card

        now = build_card(
            config, engine, tok, items, k, temperature, top_p, max_length, sources, limit, question_key, answer_key
        )
        problems = unmatched(earlier.card, now)
        typer.echo(f"repeating {earlier.source} with the settings of its eval card", err=True)
        for field, why, value in earlier.ignored:
            shown = repr(value)
            shown = shown if len(shown) <= 200 else shown[:200] + "..."
            typer.echo(
                f"not taken from the card: {field} = {shown} (it {why}); this machine's config or the command "
                "line sets it",
                err=True,
            )
        for field, before, after in problems:
            typer.echo(f"cannot match {field}: it was {before}, here it is {after}", err=True)
        if not problems:
            typer.echo("every field of its eval card is matched", err=True)
    if config.tools.backend == "local":
        _warn_if_kb_down(config.tools.local.urls)
    try:
        folder = asyncio.run(
            run_eval(
                items,
                config,
                engine,
                tok,
                Path(out),
                k,
                concurrency,
                max_length,
                temperature,
                top_p,
                sources=sources,
                limit=limit,
                question_key=question_key,
                answer_key=answer_key,
                other_settings=other_settings,
            )
        )
    except ResumeRefused as exc:
        raise _fail(str(exc)) from None
    typer.echo((folder / "summary.md").read_text())
    typer.echo(f"report: {(folder / 'report.html').resolve()}")
    _exit_if_nothing_scored(folder)


def _warn_if_kb_down(urls: list[str]) -> None:
    """One line before a run whose every search would fail: the items are recorded as failed, not scored."""
    from asearcher_plugin.tools.preflight import answers_retrieve

    for url in urls:
        try:
            answers_retrieve(url, timeout=10.0)
            return
        except Exception:  # noqa: BLE001 - any failure means this server cannot be searched
            continue
    from local_retriever.server_process import serve_command

    typer.echo(
        f"warning: no knowledge-base server answers at {', '.join(urls)}; every search will fail. "
        f"Start one with `{serve_command()}` (after `asearcher quickstart`) or pass --kb-url",
        err=True,
    )


def _exit_if_nothing_scored(folder) -> None:
    """An eval whose every item failed for the infrastructure measured nothing: it must not look like a result."""
    import json

    metrics = json.loads((folder / "metrics.json").read_text())
    failed, errors = metrics["items_failed"], metrics.get("items_error", 0)
    if metrics["items_ok"] == 0 and failed + errors > 0:
        typer.echo(
            f"error: no item was scored: {failed} failed for infrastructure reasons (the knowledge base or the "
            f"model server did not answer), {errors} on their own; see trajectories.jsonl's `error` fields",
            err=True,
        )
        raise typer.Exit(1)


def _engine(config, items, hf_model, base_urls, model, tokenizer, reference_policy, earlier):
    from asearcher_plugin.engines import make_engine

    if hf_model or base_urls:
        return make_engine(hf_model, base_urls, model, tokenizer)
    if reference_policy:
        from transformers import AutoTokenizer

        from asearcher_plugin.agent.reference_policy import ReferencePolicy
        from asearcher_plugin.engines.tiny_model import ensure_tiny_model

        tok = AutoTokenizer.from_pretrained(tokenizer or str(ensure_tiny_model("runs/tiny-model")))
        return ReferencePolicy.for_items(tok, config, items), tok
    from asearcher_plugin.eval.like import make_engine_like

    return make_engine_like(earlier.card["model"], config, items, tokenizer)


@eval_app.command("compare")
def compare_cmd(
    run_a: str = typer.Argument(..., help="the first run's output folder (A)"),
    run_b: str = typer.Argument(..., help="the second run's output folder (B); differences are B - A"),
    out: str = typer.Option(
        None, "--out", help="where compare.md, compare.html and compare.json go [default: RUN_B/compare]"
    ),
):
    """Two runs side by side per dataset and metric: paired bootstrap interval of B - A over the questions both
    scored, and where their eval cards differ."""
    from pathlib import Path

    from asearcher_plugin.eval.compare import CompareError, render_markdown, write_comparison

    folder = Path(out) if out else Path(run_b) / "compare"
    try:
        result = write_comparison(Path(run_a), Path(run_b), folder)
    except CompareError as exc:
        raise _fail(str(exc)) from None
    typer.echo(render_markdown(result))
    typer.echo(f"comparison: {(folder / 'compare.html').resolve()}")
