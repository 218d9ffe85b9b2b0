"""`asearcher quickstart`: the whole local path on a machine without a GPU, ending in a report.

1. build the sample knowledge base (real Wikipedia articles from the gensim wheel) and serve it;
2. make the tiny model (or use a served model with --base-url);
3. run the CPU recipe's rollout through the streaming scheduler on Ray;
4. evaluate the built-in questions with the model and with the scripted reference policy (a script that searches,
   reads the top page and answers from it, some answers wrong on purpose), and write an HTML report for each:
   the tiny model's answers are noise, the policy's show what a working agent's trajectories look like.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import warnings
from pathlib import Path

from rich.console import Console


def run_quickstart(
    workdir: Path,
    port: int,
    questions: int,
    k: int,
    base_url: list[str] | None,
    model: str,
    tokenizer: str | None,
    console: Console,
    keep_serving: bool = False,
) -> Path:
    """The scripted reference policy's report; `keep_serving` leaves the KB server up until Ctrl-C or SIGTERM."""
    from local_retriever.server_process import sigterm_as_interrupt

    with sigterm_as_interrupt():  # `kill PID` stops the child server too
        on_sigterm = signal.getsignal(signal.SIGTERM)
        return _run(workdir, port, questions, k, base_url, model, tokenizer, console, keep_serving, on_sigterm)


def _run(workdir, port, questions, k, base_url, model, tokenizer, console, keep_serving, on_sigterm) -> Path:
    import ray

    from local_retriever.build import build_kb
    from local_retriever.manifest import MANIFEST_FILE
    from local_retriever.sample import load_sample_questions, sample_dump_path
    from local_retriever.server_process import check_port_free, serve_command, start_server, wait_healthy

    from ..agent.reference_policy import NAME as REFERENCE
    from ..agent.reference_policy import ReferencePolicy
    from ..engines import make_engine
    from ..engines.tiny_model import is_random_tiny_model, make_tiny_model
    from ..eval.datasets import load_dataset
    from ..eval.runner import run_eval
    from ..recipe import load_recipe
    from ..settings.config import AgentConfig, SchedulerConfig
    from .rollout import rollout

    workdir.mkdir(parents=True, exist_ok=True)
    kb, tiny = workdir / "sample-kb", workdir / "tiny-model"
    console.rule("1/4 knowledge base")
    if not (kb / MANIFEST_FILE).is_file():
        manifest, _ = build_kb(sample_dump_path(), kb)
        console.print(
            f"built {manifest.passages} passages from {manifest.pages} Wikipedia articles in {manifest.build_seconds}s"
        )
    url = f"http://127.0.0.1:{port}"
    check_port_free("127.0.0.1", port)  # else another server there would answer in this one's place
    server = start_server(kb, port, "hybrid")
    try:
        health = wait_healthy(url, server)
        console.print(f"serving {health['corpus_size']} passages ({health['retriever']}) at {url}")

        console.rule("2/4 model")
        if base_url:
            console.print(f"using the served model {model} at {', '.join(base_url)}")
        elif not (tiny / "config.json").is_file() or not is_random_tiny_model(
            tiny
        ):  # unmarked: made by an older version
            make_tiny_model(tiny)
            console.print(
                f"made a tiny random Qwen2 model in {tiny} (its answers are noise; --base-url for real ones)"
            )

        agent = load_recipe("cpu_tiny")["agent"]  # packaged with the code: the same from a checkout or a wheel
        agent.setdefault("tools", {}).setdefault("local", {})["urls"] = [url]

        console.rule("3/4 streaming rollout on Ray (CPU engines, no training)")
        prompts = [(q["question"], q["golden_answers"]) for q in load_sample_questions()]
        with warnings.catch_warnings():  # Ray's tip about a future default for GPU variables: no GPU here
            warnings.filterwarnings("ignore", "Tip: In future versions of Ray", FutureWarning)
            ray.init(
                include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, logging_level=logging.WARNING
            )
        try:
            stats = (
                asyncio.run(
                    rollout(
                        str(tiny),
                        agent,
                        prompts,
                        workdir / "rollout" / "trajectories.jsonl",
                        engines=2,
                        batch_size=2,
                        n_samples=2,
                        steps=3,
                        scheduler=SchedulerConfig(max_concurrent=4, max_staleness=1),
                        max_length=1024,
                    )
                )
                if not base_url
                else None
            )
        finally:
            ray.shutdown()
            with contextlib.suppress(ValueError):  # ValueError: not the main thread, where nothing was installed
                signal.signal(signal.SIGTERM, on_sigterm)  # Ray's init and shutdown replaced it
        if stats:
            console.print(
                f"{stats['trajectories']} trajectories in {stats['seconds']:.0f}s "
                f"-> {workdir / 'rollout' / 'trajectories.jsonl'}"
            )

        console.rule("4/4 evaluation and reports")
        config = AgentConfig.model_validate(agent)
        items = load_dataset("sample", limit=questions)
        engine, tok = make_engine(None if base_url else str(tiny), base_url, model, tokenizer)
        out = asyncio.run(run_eval(items, config, engine, tok, workdir / "eval", k=k, concurrency=4, max_length=1024))
        _print_result(console, out, k, f"served model {model}" if base_url else "tiny random model")
        if not base_url:
            console.print("[yellow]its answers are noise: --base-url URL evaluates a served model[/yellow]")

        # The policy writes whole questions as queries and reads whole page parts: more room per turn and in all
        # than the tiny model's recipe gives; the card of its report records both.
        policy_config = config.model_copy(update={"max_new_tokens_per_turn": 256})
        policy = ReferencePolicy.for_items(tok, policy_config, items)
        ref = asyncio.run(
            run_eval(
                items, policy_config, policy, tok, workdir / "eval-reference", k=k, concurrency=4, max_length=8192
            )
        )
        _print_result(console, ref, k, REFERENCE)
        # The policy's report leads: it shows the agent searching, reading and answering; the model's sits beside
        # it, and on the tiny random model it is all zeros.
        report = (ref / "report.html").resolve()
        console.print(
            f"[bold]report, the agent at work ({REFERENCE}, a script, not a model): {report}[/bold]", soft_wrap=True
        )
        who = f"served model {model}" if base_url else "tiny random model, its answers noise"
        console.print(f"report beside it ({who}): {(out / 'report.html').resolve()}", soft_wrap=True)
        if keep_serving:
            try:  # the way a kept server is stopped, from here on (a signal may come as soon as the line is out)
                console.print(
                    f"knowledge base still serving at {url} (pid {server.pid}); Ctrl-C or `kill {os.getpid()}` "
                    "stops it",
                    soft_wrap=True,
                )
                server.wait()
            except KeyboardInterrupt:  # not a failure
                pass
        _stop(server)
        console.print(
            "knowledge-base server stopped; `asearcher quickstart --keep-serving` leaves it up, or serve it again "
            f"for `asearcher kb query` and `asearcher eval`: {serve_command(kb, port, 'hybrid')}",
            soft_wrap=True,
        )
        return report
    except KeyboardInterrupt:
        _stop(server)
        console.print("interrupted; knowledge-base server stopped")
        raise
    finally:
        _stop(server)


def _stop(server) -> None:
    if server.poll() is None:
        server.terminate()
        server.wait(timeout=30)


def _print_result(console: Console, out: Path, k: int, who: str) -> None:
    metrics = json.loads((out / "metrics.json").read_text())
    overall = metrics["datasets"].get("overall", {})
    f1, searches = overall.get("f1", {}), overall.get("distributions", {}).get("searches", {})
    console.print(
        f"{who}: {metrics['items_ok']} items, F1 Avg@{k} {f1.get(f'avg@{k}', 0):.3f}, "
        f"Pass@{k} {f1.get(f'pass@{k}', 0):.3f}, {searches.get('mean', 0):.1f} searches per trajectory"
    )
