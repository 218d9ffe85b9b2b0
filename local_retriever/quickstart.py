"""`asearcher kb quickstart`: sample KB built, served in a real server process, asked real questions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .recall import recall_at_k
from .server_process import check_port_free, serve_command, sigterm_as_interrupt, start_server, wait_healthy


def run_quickstart(kb_dir: Path, port: int, retriever: str, keep_serving: bool, console: Console) -> dict:
    with sigterm_as_interrupt():  # `kill PID` stops the child server too
        return _run(kb_dir, port, retriever, keep_serving, console)


def _run(kb_dir: Path, port: int, retriever: str, keep_serving: bool, console: Console) -> dict:
    from .build import build_kb
    from .client import RetrievalClient
    from .manifest import MANIFEST_FILE
    from .sample import load_sample_questions, sample_dump_path

    kb_dir = Path(kb_dir)
    if not (kb_dir / MANIFEST_FILE).is_file():
        console.rule("1/3 building the sample knowledge base (real Wikipedia articles from the gensim wheel)")
        manifest, _ = build_kb(sample_dump_path(), kb_dir)
        console.print(
            f"{manifest.passages} passages, {manifest.pages} pages, {manifest.redirects} redirects "
            f"in {manifest.build_seconds}s -> {kb_dir}"
        )
    else:
        console.print(f"reusing the knowledge base in {kb_dir}")

    console.rule(f"2/3 serving it on http://127.0.0.1:{port} ({retriever})")
    url = f"http://127.0.0.1:{port}"
    check_port_free("127.0.0.1", port)  # else another server there would answer in this one's place
    proc = start_server(kb_dir, port, retriever)
    try:
        health = wait_healthy(url, proc)
        console.print({k: health[k] for k in ("corpus_size", "pages", "index_type", "retriever")})

        console.rule("3/3 asking the sample questions")
        questions = load_sample_questions()

        async def ask():
            async with RetrievalClient(url) as client:
                hits = await client.retrieve([q["question"] for q in questions], topk=10)
                page = await client.access([questions[0]["supporting_titles"][0]])
                return hits, page

        hits, page = asyncio.run(ask())
        titles = [[h["document"]["title"] for h in row] for row in hits]
        recall = recall_at_k(questions, titles)
        table = Table(title="sample questions (first 8)")
        for col in ("question", "gold answer", "top passage title", "gold article in top 5"):
            table.add_column(col)
        for q, ranked in list(zip(questions, titles))[:8]:
            table.add_row(
                q["question"],
                q["golden_answers"][0],
                ranked[0] if ranked else "-",
                "yes" if recall_at_k([q], [ranked], ks=(5,))["recall@5"] else "no",
            )
        Console().print(table)
        console.print(f"{len(questions)} questions: " + ", ".join(f"{k} {v:.2f}" for k, v in recall.items()))
        console.print(f"/access {questions[0]['supporting_titles'][0]!r} -> {page[0]['url'] if page[0] else None}")
        curl = (
            f"curl -s {url}/retrieve -H 'content-type: application/json' "
            '-d \'{"queries": ["capital of Angola"], "topk": 3, "return_scores": true}\''
        )
        console.print(f"try it: {curl}", soft_wrap=True)  # one line at any width: it is copied and pasted
        if keep_serving:
            console.print(f"server running (pid {proc.pid}); Ctrl-C to stop")
            proc.wait()
        else:
            again = serve_command(kb_dir, port, retriever)
            console.print(f"server stopped; --keep-serving leaves it up, or serve it again: {again}", soft_wrap=True)
        return {"recall": recall, "health": health}
    except KeyboardInterrupt:
        return {}
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
