"""`asearcher kb ...`: build, serve, query and try out a local knowledge base."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from .build import SourceFormat as BuildFormat
from .encoder import DEFAULT_ENCODER, ENCODER_PRESETS, EncoderConfig
from .kb import RetrieverName
from .options import choice, out_dir, split_list

app = typer.Typer(help="Local knowledge base: build, serve and query a Wikipedia-style corpus.", no_args_is_help=True)
console = Console(stderr=True, soft_wrap=True)  # a line not cut at 80 columns in a pipe: commands are copied


# Choices as enums, from the types the code takes: click refuses a typo before any work starts, --help lists them.
SourceFormat = choice("SourceFormat", BuildFormat)
EncoderPreset = choice("EncoderPreset", ENCODER_PRESETS)
Pooling = choice("Pooling", EncoderConfig.model_fields["pooling"].annotation)
Retriever = choice("Retriever", RetrieverName)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)  # plain text: a path must not be wrapped mid-word
    raise typer.Exit(2)


@app.command()
def build(
    source: str = typer.Argument(
        ...,
        help="corpus: JSONL ({id, contents} or {id, title, text, url}), "
        "a MediaWiki dump (.xml/.xml.bz2), or `sample` for the bundled Wikipedia sample",
    ),
    out: Path | None = typer.Option(None, "--out", help="knowledge-base folder to create"),
    legacy_out: Path | None = typer.Argument(None, hidden=True, help="deprecated: the folder as a positional"),
    fmt: SourceFormat = typer.Option(SourceFormat.auto, "--format", help="corpus format; auto goes by the file name"),
    encoder: str = typer.Option(
        DEFAULT_ENCODER,
        help="HF model id or local folder of the dense encoder, or a preset: e5-base-v2, e5-small-v2, e5-large-v2",
    ),
    encoder_preset: EncoderPreset = typer.Option(
        EncoderPreset.auto,
        help="auto (e5 when the model's name says "
        "so) | e5 (mean pooling, 'query: ' / 'passage: ') | none; explicit "
        "options below win",
    ),
    pooling: Pooling | None = typer.Option(
        None, help="auto (from the model folder) | mean | cls [default: auto, mean for e5]"
    ),
    normalize: bool = typer.Option(True, help="L2-normalise embeddings (inner product = cosine)"),
    max_length: int = typer.Option(256, help="encoder max tokens per passage/query"),
    query_prefix: str | None = typer.Option(None, help="prepended to queries [default: '', 'query: ' for e5]"),
    passage_prefix: str | None = typer.Option(None, help="prepended to passages [default: '', 'passage: ' for e5]"),
    batch_size: int = typer.Option(32, help="encoder batch size"),
    faiss_factory: str = typer.Option(
        "Flat", help="FAISS factory string: Flat, HNSW32, HNSW32,SQ8, IVF4096,PQ64, ..."
    ),
    dense: bool = typer.Option(True, help="build the dense index"),
    bm25: bool = typer.Option(True, help="build the BM25 index"),
    import_faiss: Path | None = typer.Option(
        None, help="use this prebuilt FAISS index (e.g. Search-R1's e5_Flat.index) instead of encoding"
    ),
    pages: Path | None = typer.Option(None, help="JSONL of whole pages ({url, title, contents}) for /access"),
    shard_size: int = typer.Option(50_000, help="passages per embedding shard (the unit of resume)"),
    passage_words: int = typer.Option(100, help="words per passage when splitting XML articles"),
    strict: bool = typer.Option(False, help="stop at the first malformed line instead of skipping it"),
    keep_embeddings: bool = typer.Option(False, help="keep the embedding shards after the index is built"),
    force: bool = typer.Option(False, help="replace OUT if it exists"),
    device: str | None = typer.Option(
        None, help="the encoder's device: cpu, cuda or cuda:N [default: cuda when torch sees one, else cpu]"
    ),
):
    """Build a knowledge base. Resumable: re-run the same command after a crash."""
    from .build import BuildOptions, build_kb
    from .corpus import MalformedLine

    out = Path(out_dir(out, legacy_out, "the positional output folder"))
    src = _sample_source() if source == "sample" else Path(source)
    try:
        enc = EncoderConfig.from_options(
            encoder,
            encoder_preset.value,
            pooling=pooling and pooling.value,
            normalize=normalize,
            max_length=max_length,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            batch_size=batch_size,
        )
    except ValueError as exc:  # pydantic's ValidationError is one
        _fail(str(exc))
    opts = BuildOptions(
        encoder=enc,
        faiss_factory=faiss_factory,
        dense=dense,
        bm25=bm25,
        strict=strict,
        shard_size=shard_size,
        passage_words=passage_words,
        import_faiss=import_faiss,
        pages_jsonl=pages,
        keep_embeddings=keep_embeddings,
        force=force,
        device=device,
    )
    try:
        manifest, report = build_kb(src, out, fmt.value, opts)  # type: ignore[arg-type]
    except (MalformedLine, FileNotFoundError, FileExistsError, ValueError) as exc:
        _fail(str(exc))
    table = Table(title=f"built {out}")
    table.add_column("item")
    table.add_column("value", justify="right")
    for key in (
        "passages",
        "pages",
        "redirects",
        "skipped_lines",
        "faiss_factory",
        "dense_index",
        "bm25_index",
        "build_seconds",
    ):
        table.add_row(key, str(getattr(manifest, key)))
    console.print(table)
    for err in report.errors[:5]:
        typer.echo(f"skipped {err}", err=True)


def _sample_source() -> Path:
    from .sample import sample_dump_path

    return sample_dump_path()


@app.command()
def serve(
    kb_dir: Path = typer.Argument(..., help="knowledge-base folder made by `asearcher kb build`"),
    host: str = typer.Option("127.0.0.1", help="address to listen on; 0.0.0.0 for every interface (other nodes)"),
    port: int = typer.Option(5005, help="port to listen on"),
    save_address_to: Path | None = typer.Option(
        None,
        "--save-address-to",
        help="folder to write Host{ip}_IP{port}.txt holding ip:port once serving, as "
        "ASearcher's clients expect in $RAG_SERVER_ADDR_DIR; removed at shutdown",
    ),
    retriever: Retriever = typer.Option(Retriever.dense, help="hybrid: reciprocal rank fusion of dense and bm25"),
    ef_search: int | None = typer.Option(None, help="HNSW efSearch (recall vs speed)"),
    nprobe: int | None = typer.Option(None, help="IVF nprobe (recall vs speed)"),
    mmap_index: bool = typer.Option(False, help="memory-map the FAISS index instead of reading it into RAM"),
    int8_queries: bool = typer.Option(False, help="encode queries with an int8-quantised encoder (CPU, ~2.5x faster)"),
    device: str = typer.Option(
        "cpu", help="the query encoder's device: cpu, cuda or cuda:N (never a GPU unless named: training may use it)"
    ),
    faiss_gpu: bool = typer.Option(
        False, help="search on every GPU FAISS sees (Flat or IVF indexes; needs a GPU build of faiss)"
    ),
    threads: int | None = typer.Option(
        None, help="CPU threads for the encoder and FAISS together, split between the two (default: all cores)"
    ),
    default_topk: int = typer.Option(3, help="hits per query when a request names no topk"),
    max_topk: int = typer.Option(100, help="largest topk a request may ask for (422 beyond)"),
    max_queries: int = typer.Option(512, help="queries per request"),
    max_query_chars: int = typer.Option(2048, help="longer queries are truncated"),
    max_batch: int = typer.Option(128, help="queries encoded together at most (one micro-batch)"),
    overlap_stages: bool = typer.Option(
        False, help="encode the next batch while this one is searched, splitting the cores (default: serial)"
    ),
    max_body_bytes: int = typer.Option(4 * 1024 * 1024, help="request body size limit (413 beyond)"),
    header_timeout: float = typer.Option(10.0, help="seconds for request line and headers (408/closed beyond)"),
    body_timeout: float = typer.Option(30.0, help="seconds for the whole body after the headers (408 beyond)"),
    keep_alive: float = typer.Option(5.0, help="seconds an idle keep-alive connection stays open"),
    max_connections: int = typer.Option(1000, help="open connections beyond which requests get 503"),
    max_reply_bytes: int = typer.Option(
        16 * 1024 * 1024, help="reply body limit: /retrieve beyond it gets 413, /access pages are cut to fit"
    ),
    write_timeout: float = typer.Option(30.0, help="seconds a client may stay behind in reading a reply"),
    allow_host: list[str] = typer.Option(
        [],
        "--allow-host",
        help="a name clients use for this server, besides IP addresses, localhost and this machine's names "
        "(other Host headers get 400: a DNS-rebinding guard); repeatable",
    ),
    access_log: bool = typer.Option(False, help="log a line per request (uvicorn's access log) on stderr"),
):
    """Serve /retrieve (Search-R1 format), /access (ASearcher format) and /health."""
    from .kb import KnowledgeBase
    from .server import ServerLimits
    from .server import serve as run
    from .server_process import PortInUse, check_port_free

    try:
        check_port_free(host, port)
        limits = ServerLimits(
            default_topk=default_topk,
            max_topk=max_topk,
            max_queries=max_queries,
            max_query_chars=max_query_chars,
            max_batch=max_batch,
            overlap_stages=overlap_stages,
            max_body_bytes=max_body_bytes,
            header_timeout_s=header_timeout,
            body_timeout_s=body_timeout,
            keep_alive_s=keep_alive,
            max_connections=max_connections,
            max_reply_bytes=max_reply_bytes,
            write_timeout_s=write_timeout,
        )
        kb = KnowledgeBase(
            kb_dir,
            retriever.value,
            ef_search=ef_search,
            nprobe=nprobe,
            mmap_index=mmap_index,
            int8_queries=int8_queries,
            device=device,
            faiss_gpu=faiss_gpu,
        )  # type: ignore[arg-type]
    except (FileNotFoundError, ValueError, PortInUse) as exc:
        _fail(str(exc))
    console.print(f"serving {kb_dir} ({len(kb.passages)} passages, {retriever.value}) on http://{host}:{port}")
    if save_address_to is None:
        run(kb, host, port, limits, threads, access_log=access_log, allow_hosts=tuple(allow_host))
        return
    from .address import AddressFile

    with AddressFile(save_address_to, host, port) as address:
        console.print(f"address file {address.path} ({address.content}) written once the server answers")
        run(kb, host, port, limits, threads, access_log=access_log, allow_hosts=tuple(allow_host))


@app.command()
def query(
    questions: list[str] = typer.Argument(..., help="one or more queries"),
    url: list[str] = typer.Option(
        ["http://127.0.0.1:5005"], help="server URL; repeatable, or comma-separated (requests fail over between them)"
    ),
    topk: int = typer.Option(3, help="hits per query"),
    as_json: bool = typer.Option(False, "--json", help="print the raw JSON result"),
):
    """Query a running server and print the hits."""
    from .client import RetrievalClient
    from .endpoints import EndpointError
    from .server_process import serve_command

    # The error below names every URL's last failure; the client's failover warnings would say it again.
    logging.getLogger("local_retriever.endpoints").setLevel(logging.ERROR)

    async def go():
        async with RetrievalClient(split_list(url)) as client:
            return await client.retrieve(list(questions), topk=topk, return_scores=True)

    try:
        result = asyncio.run(go())
    except EndpointError as exc:
        # `asearcher quickstart` stops the server it started: say how to serve its knowledge base again
        typer.echo(f"error: {exc}; is a server running? Start one with `{serve_command()}`", err=True)
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
        return
    for q, hits in zip(questions, result):
        _print_hits(q, hits)


def _print_hits(question: str, hits: list[dict]) -> None:
    table = Table(title=question, show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("title")
    table.add_column("passage")
    for i, hit in enumerate(hits, 1):
        doc = hit["document"]
        table.add_row(str(i), f"{hit['score']:.3f}", doc.get("title", ""), doc.get("text", "")[:90] + "...")
    Console().print(table)


@app.command()
def quickstart(
    out: Path | None = typer.Option(
        None, "--out", help="where the sample knowledge base is built [default: runs/sample-kb]"
    ),
    legacy_dir: Path | None = typer.Option(None, "--dir", hidden=True, help="deprecated spelling of --out"),
    port: int = typer.Option(5005, help="port of the knowledge-base server"),
    retriever: Retriever = typer.Option(Retriever.hybrid, help="hybrid: reciprocal rank fusion of dense and bm25"),
    keep_serving: bool = typer.Option(False, help="leave the server running after the demo queries"),
):
    """Build the bundled Wikipedia sample KB, serve it, and ask it the sample questions."""
    from .quickstart import run_quickstart

    kb_dir = Path(out_dir(out and str(out), legacy_dir and str(legacy_dir), "--dir", "runs/sample-kb"))
    from .server_process import PortInUse

    try:
        run_quickstart(kb_dir, port, retriever.value, keep_serving, console)
    except PortInUse as exc:
        _fail(str(exc))


if __name__ == "__main__":
    app()
