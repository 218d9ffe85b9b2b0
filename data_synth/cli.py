"""`asearcher synth`, registered through the `asearcher.commands` entry points (setup.py)."""

from __future__ import annotations

import typer

from local_retriever.options import out_dir, split_list

SYNTH_EXAMPLE = """
Example, from seeds to a training file (two served models and the sample KB):

  asearcher kb build sample --out runs/sample-kb && asearcher kb serve runs/sample-kb --port 5005 &
  vllm serve Qwen/QwQ-32B --port 8001 &  vllm serve Qwen/Qwen2.5-72B-Instruct --port 8002 &
  asearcher synth --out runs/synth --seeds seeds.jsonl \\
      --generator-url http://127.0.0.1:8001/v1 --generator-model Qwen/QwQ-32B \\
      --judge-url http://127.0.0.1:8002/v1 --judge-model Qwen/Qwen2.5-72B-Instruct \\
      --kb-url http://127.0.0.1:5005 --rounds 6 --k 8

seeds.jsonl rows: {"question": "...", "answer": "..."} (or "golden_answers": [...]); --kb-dir DIR --pages N
starts from random KB pages instead. Output in runs/synth: train.jsonl (question, answer, golden_answers,
provenance; the keys the recipes read), items.jsonl (every round with its verdicts), stats.json, report.md.
Re-running the same command resumes. Offline, `python -m data_synth.scripted_chat --port 8001` plays both models.
"""

app = typer.Typer()


@app.command(epilog=SYNTH_EXAMPLE)
def synth(
    out: str = typer.Option(None, "--out", help="run folder (re-running resumes it)"),
    legacy_out: str = typer.Argument(None, hidden=True, help="deprecated: the run folder as a positional"),
    seeds: str = typer.Option(None, help="seed QAs, JSONL with question and answer"),
    kb_dir: str = typer.Option(None, help="a built KB to draw seed pages from (instead of --seeds)"),
    pages: int = typer.Option(100, help="pages drawn with --kb-dir"),
    config: str = typer.Option(None, help="synthesis YAML (every field of data_synth/config.py)"),
    set_: list[str] = typer.Option([], "--set", help="override a config field, e.g. judge.model=qwen or k=4"),
    generator_url: list[str] = typer.Option([], help="generator endpoint base URL; repeatable, or comma-separated"),
    generator_model: str = typer.Option(None, help="model name on the generator endpoint"),
    judge_url: list[str] = typer.Option([], help="judge endpoint base URL; repeatable, or comma-separated"),
    judge_model: str = typer.Option(None, help="model name on the judge endpoint"),
    kb_url: list[str] = typer.Option(
        [], help="knowledge-base server URL for injection searches; repeatable, or comma-separated"
    ),
    rounds: int = typer.Option(None, help="injection/fuzzing rounds per seed"),
    k: int = typer.Option(None, help="tool-free answers per difficulty check"),
    concurrency: int = typer.Option(None, help="seeds in flight (per Ray task with --ray-address)"),
    ray_address: str = typer.Option(None, help="run in shards on Ray: `auto`, `ray://host:10001`, or `local`"),
    limit: int = typer.Option(None, help="use only the first N seeds"),
):
    """Synthesise hard, grounded questions: injection and fuzzing rounds, each validated."""
    import json
    from pathlib import Path

    from asearcher_plugin.settings.yamlio import parse_assignment

    from .config import SynthConfigError, load_synth_config
    from .run import run_synth
    from .sources import SeedError, kb_page_seeds, load_seeds

    folder = Path(out_dir(out, legacy_out, "the positional run folder"))
    if bool(seeds) == bool(kb_dir):
        typer.echo("error: give exactly one of --seeds or --kb-dir", err=True)
        raise typer.Exit(2)
    flags = {
        "generator.base_urls": split_list(generator_url) or None,
        "generator.model": generator_model,
        "judge.base_urls": split_list(judge_url) or None,
        "judge.model": judge_model,
        "tools.local.urls": split_list(kb_url) or None,
        "rounds": rounds,
        "k": k,
        "concurrency": concurrency,
    }
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
        raise typer.Exit(2) from None
    stats = run_synth(items[:limit] if limit else items, cfg, folder, ray_address)
    typer.echo((folder / "report.md").read_text())
    typer.echo(json.dumps({"emitted": stats["emitted"], "train": str(folder / "train.jsonl")}))


if __name__ == "__main__":
    app()
