"""The `asearcher` command."""

from __future__ import annotations

import typer

from local_retriever.cli import app as kb_app

app = typer.Typer(help="Long-horizon search agents for OpenRLHF.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")


@app.command()
def quickstart(
    workdir: str = typer.Option("runs", "--dir", help="where the KB, model, trajectories and report go"),
    port: int = typer.Option(5005, help="port of the knowledge-base server"),
    questions: int = typer.Option(20, help="built-in questions to evaluate"),
    k: int = typer.Option(2, help="runs per question"),
    base_url: str = typer.Option(None, help="an OpenAI-compatible server for real answers, e.g. http://host:8000/v1"),
    model: str = typer.Option("default", help="model name on that server"),
    tokenizer: str = typer.Option(None, help="tokenizer path for --base-url (defaults to --model)"),
):
    """The whole path on CPU: sample KB served, tiny model, streaming rollout on Ray, evaluation, HTML report."""
    from pathlib import Path

    from rich.console import Console

    from asearcher_plugin.quickstart import run_quickstart

    run_quickstart(Path(workdir), port, questions, k, base_url, model, tokenizer, Console(stderr=True))

@app.command()
def train(
    recipe: str = typer.Argument(..., help="a packaged recipe (cpu_tiny, local_7b_1node, local_7b_16nodes, "
                                 "local_14b_2nodes, web_qwq32b) or a recipe YAML path"),
    set_: list[str] = typer.Option([], "--set", help="override, e.g. openrlhf.rollout.batch_size=64 or agent.max_turns=16"),
    print_cmd: bool = typer.Option(False, help="print the launcher and `ray job submit` commands and exit"),
    dry_run: bool = typer.Option(False, help="check the recipe and the flags with OpenRLHF's own parser and asserts, "
                                             "then exit"),
    cpu: bool = typer.Option(False, help="OpenRLHF's real orchestration without a GPU: vLLM and DeepSpeed replaced by "
                                         "CPU stand-ins (asearcher_plugin.openrlhf_cpu); for trying the recipe path"),
):
    """Train with OpenRLHF from a recipe: agent and scheduler config travel with the run in Ray's runtime env."""
    import shlex

    from asearcher_plugin.launch import LaunchError, ray_job_command, run_openrlhf
    from asearcher_plugin.openrlhf_args import RecipeFlagError
    from asearcher_plugin.recipe import Recipe, RecipeError

    try:
        model = Recipe.load(recipe, set_)
        argv, config = model.argv(), model.run_config()
        if print_cmd:
            typer.echo(f"ASEARCHER_RUN_CONFIG={shlex.quote(config.model_dump_json())} python -m asearcher_plugin.launch "
                       + shlex.join(argv))
            typer.echo(ray_job_command(argv, config))
            return
        if dry_run:
            typer.echo(model.check().summary())
            typer.echo(f"{model.source}: {len(argv)} arguments accepted by OpenRLHF's parser and checks")
            return
    except RecipeError as exc:  # names the file and the field
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    except LaunchError as exc:
        typer.echo(f"error: {recipe}: {exc}", err=True)
        raise typer.Exit(2)
    try:
        run_openrlhf(argv, config, cpu=cpu)
    except (RecipeFlagError, LaunchError) as exc:  # refused before any actor starts
        typer.echo(f"error: {recipe}: {exc}", err=True)
        raise typer.Exit(2)


@app.command()
def rollout(
    recipe: str = typer.Argument(..., help="a packaged recipe name or a recipe YAML; cpu_tiny runs on any laptop"),
    out: str = typer.Option("runs/rollout/trajectories.jsonl", help="trajectories JSONL"),
    engines: int = typer.Option(2, help="CPU engine actors on Ray"),
    steps: int = typer.Option(3, help="batches to hand out"),
    set_: list[str] = typer.Option([], "--set", help="recipe override, as for `asearcher train`"),
):
    """Run the streaming scheduler with in-process engines on Ray, without training; write trajectories."""
    import asyncio
    import json
    from pathlib import Path

    import ray

    from asearcher_plugin.recipe import RecipeError, load_recipe
    from asearcher_plugin.rollout import load_prompts
    from asearcher_plugin.rollout import rollout as run

    try:
        r = load_recipe(recipe, set_)
    except RecipeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    from asearcher_plugin.recipe import run_config

    flags, sched = r["openrlhf"], run_config(r).scheduler
    model, data = Path(flags["actor.model_name_or_path"]), Path(flags["data.prompt_dataset"])
    if model == Path("runs/tiny-model"):
        from asearcher_plugin.engines.tiny_model import ensure_tiny_model

        ensure_tiny_model(model)
    if not data.exists() and data == Path("runs/sample_prompts.jsonl"):
        from local_retriever.sample import load_sample_questions

        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_text("".join(json.dumps(q) + "\n" for q in load_sample_questions()))
    if not model.exists():
        typer.echo(f"error: model not found: {model} (a local path; no model hub is used)", err=True)
        raise typer.Exit(2)
    prompts = load_prompts(data, flags.get("data.input_key", "input"), flags.get("data.label_key") or "label")
    from asearcher_plugin.scheduler import FatalRolloutError

    ray.init(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        result = asyncio.run(run(str(model), r.get("agent") or {}, prompts, Path(out), engines,
                                 int(flags.get("rollout.batch_size", 4)), int(flags.get("rollout.n_samples_per_prompt", 1)),
                                 steps, sched, int(flags.get("data.max_len", 2048)),
                                 float(flags.get("rollout.temperature", 1.0))))
    except KeyboardInterrupt:
        typer.echo(f"interrupted: engines stopped; trajectories so far are in {out}", err=True)
        raise typer.Exit(130)
    except FatalRolloutError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)
    finally:
        ray.shutdown()
    typer.echo(json.dumps(result))
    typer.echo(f"trajectories written to {out}")


@app.command("eval")
def eval_cmd(
    dataset: list[str] = typer.Option(None, "--dataset", help="built-in name (sample) or JSONL/JSON/Parquet path; "
                                      "repeatable (default: sample, unless --data-dir is given)"),
    data_dir: str = typer.Option(None, "--data-dir", "--data_dir",
                                 help="ASearcher's layout: DIR/NAME/{split}.jsonl or .json, one folder per dataset"),
    data_names: str = typer.Option(None, "--data-names", "--data_names",
                                   help="with --data-dir: comma-separated folder names, e.g. GAIA,Frames"),
    split: str = typer.Option("test", help="with --data-dir: the file name inside each dataset folder"),
    out: str = typer.Option("runs/eval", help="output folder (re-running resumes it)"),
    k: int = typer.Option(1, help="runs per question (seeds 0..k-1): Avg@k and Pass@k"),
    hf_model: str = typer.Option(None, help="evaluate an in-process transformers model (CPU or GPU)"),
    base_url: str = typer.Option(None, help="OpenAI-compatible server URL(s), comma-separated, e.g. http://host:8000/v1"),
    model: str = typer.Option("default", help="model name on the server"),
    tokenizer: str = typer.Option(None, help="tokenizer path for --base-url (defaults to --model)"),
    agent_config: str = typer.Option(None, help="agent YAML (else $ASEARCHER_CONFIG, else defaults)"),
    kb_url: str = typer.Option(None, help="knowledge-base server URL(s), overriding the agent config"),
    concurrency: int = typer.Option(8),
    max_length: int = typer.Option(8192, help="token budget per trajectory"),
    temperature: float = typer.Option(0.6),
    top_p: float = typer.Option(0.95),
    limit: int = typer.Option(None, help="questions per dataset"),
    question_key: str = typer.Option(None),
    answer_key: str = typer.Option(None),
):
    """Evaluate an agent: Avg@k / Pass@k with EM, F1, cover-EM, substring (and the judge if configured)."""
    import asyncio
    from pathlib import Path

    from asearcher_plugin.config import ConfigError, load_config
    from asearcher_plugin.eval.datasets import DatasetError, asearcher_layout, load_datasets
    from asearcher_plugin.eval.runner import run_eval

    if bool(data_dir) != bool(data_names):
        typer.echo("error: --data-dir and --data-names go together", err=True)
        raise typer.Exit(2)
    try:
        config = load_config(agent_config)
        named = asearcher_layout(data_dir, data_names, split) if data_dir else []
        items = load_datasets(dataset or ([] if named else ["sample"]), question_key, answer_key, limit, named)
    except (ConfigError, DatasetError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if kb_url:
        config.tools.local.urls = [u.strip() for u in kb_url.split(",") if u.strip()]
    if bool(hf_model) == bool(base_url):
        typer.echo("error: give exactly one of --hf-model or --base-url", err=True)
        raise typer.Exit(2)
    if hf_model:
        from asearcher_plugin.engines.hf import HFEngine

        engine = HFEngine(hf_model)
        tok = engine.tokenizer
    else:
        from transformers import AutoTokenizer

        from asearcher_plugin.engines.openai import OpenAIEngine

        tok = AutoTokenizer.from_pretrained(tokenizer or model)
        engine = OpenAIEngine(base_url, model, tok)
    folder = asyncio.run(run_eval(items, config, engine, tok, Path(out), k, concurrency, max_length, temperature, top_p))
    typer.echo((folder / "summary.md").read_text())
    typer.echo(f"report: {(folder / 'report.html').resolve()}")


SYNTH_EXAMPLE = """
Example, from seeds to a training file (two served models and the sample KB):

  asearcher kb build sample runs/sample-kb && asearcher kb serve runs/sample-kb --port 5005 &
  vllm serve Qwen/QwQ-32B --port 8001 &  vllm serve Qwen/Qwen2.5-72B-Instruct --port 8002 &
  asearcher synth runs/synth --seeds seeds.jsonl \\
      --generator-url http://127.0.0.1:8001/v1 --generator-model Qwen/QwQ-32B \\
      --judge-url http://127.0.0.1:8002/v1 --judge-model Qwen/Qwen2.5-72B-Instruct \\
      --kb-url http://127.0.0.1:5005 --rounds 6 --k 8

seeds.jsonl rows: {"question": "...", "answer": "..."} (or "golden_answers": [...]); --kb-dir DIR --pages N
starts from random KB pages instead. Output in runs/synth: train.jsonl (question, answer, golden_answers,
provenance; the keys the recipes read), items.jsonl (every round with its verdicts), stats.json, report.md.
Re-running the same command resumes.
"""


@app.command(epilog=SYNTH_EXAMPLE)
def synth(
    out: str = typer.Argument(..., help="run folder (re-running resumes it)"),
    seeds: str = typer.Option(None, help="seed QAs, JSONL with question and answer"),
    kb_dir: str = typer.Option(None, help="a built KB to draw seed pages from (instead of --seeds)"),
    pages: int = typer.Option(100, help="pages drawn with --kb-dir"),
    config: str = typer.Option(None, help="synthesis YAML (every field of data_synth/config.py)"),
    set_: list[str] = typer.Option([], "--set", help="override a config field, e.g. judge.model=qwen or k=4"),
    generator_url: list[str] = typer.Option([], help="generator endpoint base URL; repeat for several"),
    generator_model: str = typer.Option(None),
    judge_url: list[str] = typer.Option([], help="judge endpoint base URL; repeat for several"),
    judge_model: str = typer.Option(None),
    kb_url: list[str] = typer.Option([], help="knowledge-base server URL for injection searches; repeatable"),
    rounds: int = typer.Option(None, help="injection/fuzzing rounds per seed"),
    k: int = typer.Option(None, help="tool-free answers per difficulty check"),
    concurrency: int = typer.Option(None, help="seeds in flight (per Ray task with --ray-address)"),
    ray_address: str = typer.Option(None, help="run in shards on Ray: `auto`, `ray://host:10001`, or `local`"),
    limit: int = typer.Option(None, help="use only the first N seeds"),
):
    """Synthesise hard, grounded questions: injection and fuzzing rounds, each validated."""
    import json
    from pathlib import Path

    from asearcher_plugin.config import parse_assignment
    from data_synth.config import SynthConfigError, load_synth_config
    from data_synth.run import run_synth
    from data_synth.sources import SeedError, kb_page_seeds, load_seeds

    if bool(seeds) == bool(kb_dir):
        typer.echo("error: give exactly one of --seeds or --kb-dir", err=True)
        raise typer.Exit(2)
    flags = {"generator.base_urls": generator_url or None, "generator.model": generator_model,
             "judge.base_urls": judge_url or None, "judge.model": judge_model, "tools.local.urls": kb_url or None,
             "rounds": rounds, "k": k, "concurrency": concurrency}
    try:
        overrides = dict(parse_assignment(item, SynthConfigError) for item in set_)
        overrides.update({key: v for key, v in flags.items() if v is not None})
        cfg = load_synth_config(config, overrides)
        if seeds:
            items, problems = load_seeds(seeds)
            for p in problems[:20]:
                typer.echo(f"skipped {p}", err=True)
        else:
            items = kb_page_seeds(kb_dir, pages)
    except (SynthConfigError, SeedError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    stats = run_synth(items[:limit] if limit else items, cfg, Path(out), ray_address)
    typer.echo((Path(out) / "report.md").read_text())
    typer.echo(json.dumps({"emitted": stats["emitted"], "train": str(Path(out) / "train.jsonl")}))


@app.command("make-tiny-model")
def make_tiny_model_cmd(
    out_dir: str = typer.Argument(..., help="folder to write the model and tokenizer to"),
    seed: int = typer.Option(0, help="weight initialisation seed"),
):
    """A tiny random Qwen2-architecture model with a tokenizer trained on the bundled sample (no hub needed)."""
    from asearcher_plugin.engines.tiny_model import make_tiny_model

    path = make_tiny_model(out_dir, seed=seed)
    typer.echo(str(path))


# Modules that only an extra installs: a command that reaches one without it says which extra, in one line.
EXTRA_MODULES = {"openrlhf": "train", "vllm": "train", "deepspeed": "train", "flash_attn": "train"}


def main() -> None:
    """The `asearcher` console script."""
    try:
        app()
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in EXTRA_MODULES:
            raise
        extra = EXTRA_MODULES[top]
        typer.echo(f"error: {top} is not installed; it comes with the [{extra}] extra: "
                   f"pip install 'asearcher-plugin[{extra}]'", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
