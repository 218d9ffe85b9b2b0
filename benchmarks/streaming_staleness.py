"""Streaming against OpenRLHF at the same trained staleness, on the real chain.

One command: `python benchmarks/streaming_staleness.py`. For each workload (the real chain's scripted episode of
benchmarks/streaming_speedup.py at 32 and 128 turns, capacity model) and each staleness bound k: the streaming
scheduler at eta = k with `on_stale: restart` (a group that would train more than k versions behind is stopped and
its prompt started again, once, then dropped: what it loses is that work, and the dropped groups' tokens) against
OpenRLHF's fastest configuration whose simulated staleness stays within k (the sweep saved in
benchmarks/results/streaming_speedup.json). Every run measures how far behind each trained token was
(trained_staleness.py, the same count for both systems); a row's bound is the largest measured in any of its runs,
not the setting.

Each run is kept under a key of the code that shapes it and its arguments (`run_key.code_key`), so the table can be
filled over several sittings: an invocation runs what is missing of its selection (--workloads, --bounds, --repeats,
--episodes), the two systems alternating, and publishes every row of the table (TABLE) from what exists. The kept
runs are also saved with the table (benchmarks/results/streaming_staleness.json, `kept`) and taken back into an empty
work folder, where their key still matches: a new checkout goes on from them. A run takes 5-10 minutes at 32 turns
on 2 cores (about 50 s of it start-up); each records the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from asearcher_plugin.recipe import Recipe  # noqa: E402
from benchmarks import openrlhf_cpu  # noqa: E402
from benchmarks.readme_table import cpu_kind, publish  # noqa: E402
from benchmarks.run_key import code_key, keep_result, kept_result  # noqa: E402
from benchmarks.streaming_speedup import CAPACITY, WORKLOADS, configurations, overrides  # noqa: E402

SWEEP = ROOT / "benchmarks" / "results" / "streaming_speedup.json"
SAVED = ROOT / "benchmarks" / "results" / "streaming_staleness.json"
# what a run executes: a result made under other code is run again. Left out (`!`): the web backend, which only
# `tools.make_toolbox` imports, for `tools.backend: web`; these runs search the local KB.
RUN_CODE = (
    "asearcher_plugin",
    "!asearcher_plugin/tools/web.py",
    "!asearcher_plugin/tools/url_guard.py",
    "local_retriever",
    "recipes",
    "constraints",
    "pyproject.toml",
    "benchmarks/openrlhf_cpu.py",
    "benchmarks/trained_staleness.py",
)
# Commits under RUN_CODE declared not to change what a run does (run_key.code_key's `neutral`), each with why.
RUN_NEUTRAL = {
    "0b73289": "the KB server's lingering close after a 400 or 408: the runs' searches are whole, well-formed "
    "requests, which it never refuses; an accepted request takes the same path as before",
    "121cf8d": "OpenRLHF's train_ppo_ray run from openrlhf/commands.py by the same runpy call with the same argv "
    "(sys.argv restored after it returns); the rest is the SFT command, which a training run never imports",
    "9294357": "modules moved into folders (settings/, rewards/, utils/, commands/, tools/registry.py) with their "
    "imports rewritten, the tools' settings split into tools/config.py: the same code under new names",
    "ffb93b4": "settings/config.py imports three more names it does not use (the tools' schemas, for old imports)",
}
PORT = 5125
# the published table's rows: both workloads at three bounds, and one longer run at 32 turns
TABLE = [
    {"workloads": list(WORKLOADS), "bounds": [4, 2, 1], "repeats": [3, 1, 1], "episodes": 1},
    {"workloads": ["32 turns"], "bounds": [4], "repeats": [1], "episodes": 3},
]


def openrlhf_within(sweep: dict, workload: str, bound: int) -> str:
    """The simulated sweep's fastest OpenRLHF configuration whose staleness stays within `bound`."""
    sim = sweep["sims"][f"{workload} / capacity"]
    names = [n for n, r in sim.items() if n.startswith("OpenRLHF") and r["staleness_max"] <= bound]
    if not names:
        raise SystemExit(f"no OpenRLHF configuration of the sweep stays within {bound} at {workload}")
    return min(names, key=lambda n: sim[n]["seconds"])


def openrlhf_candidates(sweep: dict, workload: str, bound: int) -> list[str]:
    """The OpenRLHF configurations that may be the fastest within `bound` on the real chain, fastest first: those
    simulated faster than `openrlhf_within`'s choice whose simulated staleness is at most bound + 1, then that
    choice. The simulator counts a group's staleness from its generate call; a token is generated at or after it, so
    the measured staleness of a configuration can come out lower than the simulated one."""
    sim = sweep["sims"][f"{workload} / capacity"]
    chosen = openrlhf_within(sweep, workload, bound)
    faster = [n for n, r in sim.items() if n.startswith("OpenRLHF") and r["seconds"] < sim[chosen]["seconds"]]
    faster = [n for n in faster if sim[n]["staleness_max"] <= bound + 1]
    return [*sorted(faster, key=lambda n: sim[n]["seconds"]), chosen]


def streaming_sets(args, bound: int) -> tuple[str, list[str]]:
    return f"streaming, eta {bound}, restart", [
        f"scheduler.max_concurrent={(bound + 1) * args.batch}",
        f"scheduler.max_staleness={bound}",
        "scheduler.on_stale=restart",
    ]


def run_args(args, workload: str, bound: int) -> SimpleNamespace:
    return SimpleNamespace(
        max_turns=Recipe.load(WORKLOADS[workload]).agent.max_turns,
        max_len=openrlhf_cpu.TINY_POSITIONS,
        scale=args.scale,
        alpha=args.alpha,
        tokens_per_turn=args.tokens_per_turn,
        turn_s=args.turn_s,
        capacity=CAPACITY,
        seed=args.seed,
        prefix_caching=True,  # as in the recipes, for both systems
        batch=args.batch,
        n=args.n,
        engines=args.engines,
        queue=1,
        eta=bound,
        fit_s=0.0,
    )


def label(workload: str, episodes: int) -> str:
    return workload if episodes == 1 else f"{workload} x {episodes} episodes"


def plan(args) -> list[tuple[str, int, int]]:
    """(workload, bound, repeat) in the order they run: every bound's first runs before any bound's second."""
    repeats = dict(zip(args.bounds, args.repeats))
    return [(w, b, i) for i in range(max(args.repeats)) for b in args.bounds for w in args.workloads if i < repeats[b]]


def run_all(args, sweep: dict) -> tuple[dict, dict]:
    """Per row, the runs of streaming and of OpenRLHF's baseline; and per row, the candidates probed (one run
    each) before the baseline, with the staleness they measured."""
    from local_retriever.server_process import start_server, wait_healthy

    work = Path(args.work).resolve()
    results: dict[str, dict[str, list[dict]]] = {}
    probes: dict[str, dict[str, int]] = {}
    server = inputs = None  # made at the first run, so publishing alone builds nothing

    def run(workload: str, bound: int, i: int, name: str, sets: list[str], episodes: int = 1) -> dict | None:
        """Run i of a configuration, or the one kept. OpenRLHF's runs do not depend on the bound (the scheduler's
        settings are off), so each is made once and serves every row."""
        nonlocal server, inputs
        streaming = name.startswith("streaming")
        ra = run_args(args, workload, bound if streaming else args.eta)
        if episodes > 1:
            sets = [*sets, f"openrlhf.train.num_episodes={episodes}"]
        key = code_key({**vars(ra), "sets": sets}, RUN_CODE, tuple(RUN_NEUTRAL))
        where = openrlhf_cpu.slug(label(workload, episodes))
        folder = work / where / (f"eta{bound}" if streaming else "openrlhf") / str(i)
        done = folder / openrlhf_cpu.slug(name) / "result.json"
        kept = kept_result(done, key)
        if kept is not None or args.publish_only:
            return kept
        if server is None:
            inputs = openrlhf_cpu.prepare(work, args.prompts)  # the KB, the tiny model, the prompts
            server = start_server(inputs[0], PORT, "bm25")
            wait_healthy(f"http://127.0.0.1:{PORT}", server)
        print(f"== {label(workload, episodes)}, bound {bound}, {name}, run {i + 1}", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        result = openrlhf_cpu.run_mode(name, sets, ra, folder, *inputs[1:], f"http://127.0.0.1:{PORT}")
        result["cpu"] = cpu_kind()
        keep_result(done, key, result)
        print(json.dumps({k: result[k] for k in ("span_s", "trained", "trained_staleness")}), flush=True)
        return result

    def baseline(workload: str, bound: int) -> str | None:
        """The first candidate whose first run (of one episode) stays within the bound (the last one whatever it
        measures). Longer runs take the one-episode choice: what bounds OpenRLHF's staleness is its queue and
        generate batch, not the run's length."""
        configs = configurations(args)
        row = probes.setdefault(f"{workload} / {bound}", {})
        for name in openrlhf_candidates(sweep, workload, bound):
            first = run(workload, bound, 0, name, overrides(configs[name], args))
            if first is None:
                return None  # --publish-only, not run yet
            row[name] = first["trained_staleness"]["max"]
            if row[name] <= bound:
                return name
        return name

    try:
        for workload, bound, i in plan(args):
            row = results.setdefault(f"{label(workload, args.episodes)} / {bound}", {})
            s_name, s_sets = streaming_sets(args, bound)
            o_name = baseline(workload, bound)
            pair = [(s_name, s_sets)]
            if o_name is not None:
                pair.append((o_name, overrides(configurations(args)[o_name], args)))
            for name, sets in pair:
                kept = run(workload, bound, i, name, sets, args.episodes)
                row.setdefault(name, [])
                if kept is not None:
                    row[name].append(kept)
    finally:
        if server is not None:
            server.terminate()
    return results, probes


def kept_runs(work: Path) -> dict[str, dict]:
    """The runs kept under `work` that the code of this commit made, by their path under `work`."""
    code = code_key({}, RUN_CODE, tuple(RUN_NEUTRAL))["code"]
    out = {}
    for path in sorted(work.rglob("result.json")):
        saved = json.loads(path.read_text())
        if saved.get("key", {}).get("code") == code:
            out[path.relative_to(work).as_posix()] = saved
    return out


def restore(work: Path) -> int:
    """Writes the runs saved with the table that `work` lacks back into it; `run` takes each only where its key
    matches (the same code, the same arguments). Returns how many it wrote."""
    saved = json.loads(SAVED.read_text()).get("kept", {}) if SAVED.is_file() else {}
    written = 0
    for rel, content in saved.items():
        path = work / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts or path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))
        written += 1
    return written


HEADER = [
    "workload",
    "max trained staleness",
    "streaming",
    "streaming span s",
    "OpenRLHF",
    "OpenRLHF span s",
    "ratio",
    "runs",
]


def spans(runs: list[dict]) -> str:
    s = [r["span_s"] for r in runs]
    return f"{statistics.median(s):.0f} ({min(s):.0f}-{max(s):.0f})" if s else "–"


def tokens_per_s(runs: list[dict]) -> float:
    return statistics.median(r["trained_staleness"]["tokens"] / r["span_s"] for r in runs)


def rows(results: dict) -> list[list]:
    out = []
    # by turns, then episodes, then the loosest bound first
    order = lambda kv: (int(kv[0].split()[0]), "episodes" in kv[0], -int(kv[0].split(" / ")[1]))  # noqa: E731
    for key, row in sorted(results.items(), key=order):
        workload, _ = key.split(" / ")
        (s_name, s_runs), (o_name, o_runs) = list(row.items()) + [("–", [])] * (2 - len(row))
        measured = [r["trained_staleness"]["max"] for r in s_runs + o_runs]
        ratio = f"{tokens_per_s(s_runs) / tokens_per_s(o_runs):.2f}x" if s_runs and o_runs else "–"
        out.append(
            [
                workload,
                f"<= {max(measured)}" if measured else "–",
                s_name,
                spans(s_runs),
                o_name,
                spans(o_runs),
                ratio,
                f"{len(s_runs)} + {len(o_runs)}",
            ]
        )
    return out


def note(args, results: dict, probes: dict) -> str:
    runs = [r for row in results.values() for rs in row.values() for r in rs]
    tried = [
        f"{row}: {name} measured {m}"
        for row, names in probes.items()
        for name, m in names.items()
        if m > int(row.split(" / ")[1])
    ]
    restarted = [f"{r['restarted']} / {r['dropped']}" for r in runs if r.get("restarted") is not None]
    cpus: dict[str, list[str]] = {}  # CPU -> the rows run on it
    for key, row in results.items():
        for kind in sorted({r.get("cpu", "?") for rs in row.values() for r in rs}):
            cpus.setdefault(kind, []).append(key)
    return (
        f"OpenRLHF 0.11.2's `train()` on CPU, {args.engines} vLLM engines with prefix caching, B={args.batch} "
        f"prompts x n={args.n}, {args.prompts} prompts, one episode (three in the row so named), "
        "async_queue_size 1 (OpenRLHF's: as its "
        "configuration says). The scripted workload is that of "
        f"the streaming table (capacity model: at most {CAPACITY} full-speed decodes of {args.turn_s:g} s per "
        "engine). Max trained staleness: the largest, over every token in the loss of every run of the row, of the "
        "update that trained it minus the weight version its engine held when it was generated. Span: first "
        "request to last trained step, median (range); ratio: streaming's trained tokens per second of span over "
        "OpenRLHF's (medians), so groups streaming dropped count against it. Runs: streaming + OpenRLHF. "
        f"Streaming's groups restarted / dropped per run, in the table's order: {', '.join(restarted) or '–'}. "
        "OpenRLHF's baseline: the "
        "sweep's configurations simulated faster than its fastest within the bound and at most one version staler "
        "were each run once first, fastest first. The first whose trained staleness stayed within the bound was "
        f"taken.{' Over the bound: ' + '. '.join(tried) + '.' if tried else ''} "
        + (
            " ".join(f"On {kind}: {', '.join(keys)}." for kind, keys in cpus.items())
            if len(cpus) > 1
            else f"CPU: {''.join(cpus)}."
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--bounds", type=int, nargs="+", default=[4, 2, 1], help="staleness bounds, one row each")
    ap.add_argument("--repeats", type=int, nargs="+", default=[3, 1, 1], help="runs per system at each bound")
    ap.add_argument("--work", default="runs/bench-streaming-staleness")
    ap.add_argument("--episodes", type=int, default=1, help="passes over the prompts a run makes (rows of their own)")
    ap.add_argument("--publish-only", action="store_true", help="publish the kept runs, run nothing")
    args = ap.parse_args()
    if len(args.repeats) != len(args.bounds):
        raise SystemExit("--repeats needs one count per --bounds value")
    sweep = json.loads(SWEEP.read_text())
    # the sweep's episode, fleet and workload, so that its choice of OpenRLHF configuration holds
    shared = ("prompts", "batch", "n", "engines", "eta", "scale", "alpha", "tokens_per_turn", "turn_s", "seed")
    args = argparse.Namespace(**vars(args), **{k: sweep["args"][k] for k in shared}, sim_etas=[])
    work = Path(args.work).resolve()
    if restored := restore(work):
        print(f"{restored} runs saved with the table written back into {work}", flush=True)
    if not args.publish_only:
        run_all(args, sweep)
    # the table always shows every row, run or not, whatever this invocation ran
    results, probes = {}, {}
    for rows_of in TABLE:
        view = argparse.Namespace(**{**vars(args), **rows_of, "publish_only": True})
        made, tried = run_all(view, sweep)
        results, probes = results | made, probes | tried
    payload = {"args": vars(args), "results": results, "probes": probes, "kept": kept_runs(work)}
    print(publish("streaming_staleness", HEADER, rows(results), note(args, results, probes), payload))


if __name__ == "__main__":
    main()
