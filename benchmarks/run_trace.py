"""Where one real-chain run's span went, from what the run left in its folder (`benchmarks/openrlhf_cpu.py` and
`streaming_speedup.py` keep one per configuration and repeat): the trainer's updates (the policy actor's fit log),
the engines' busy intervals (`cpu_harness.engine_stats`), and, for streaming, the scheduler's trace (which group
was admitted at which policy version, how many model calls each trajectory made).

    python benchmarks/run_trace.py runs/bench-streaming-speedup/128_turns/capacity/0/*

prints per run: the span and each update's start-end, the engines' idle share overall, during updates and by tenth
of the span, the longest trajectory (its admission and seconds a call), and the model calls one engine ran alone
at the end of the span (a median: what a call of the straggler costs with nothing else decoding).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.openrlhf_cpu import busy_in as busy  # noqa: E402
from benchmarks.openrlhf_cpu import read_run  # noqa: E402


def report(run: Path) -> list[str]:
    fits, engines, batches = read_run(run)
    t0 = min(x for ivs in engines.values() for x, _ in ivs)
    end = fits[-1]["time"]
    span = end - t0
    updates = [(f.get("started", f["time"]) - t0, f["time"] - t0) for f in fits]
    lines = [f"{run}: span {span:.0f} s, {len(fits)} updates"]
    lines.append("  updates (s from the first request): " + ", ".join(f"{a:.0f}-{b:.0f}" for a, b in updates))
    n = len(engines)
    idle = n * span - sum(busy(ivs, t0, end) for ivs in engines.values())
    idle_updating = sum((b - a) - busy(ivs, a + t0, b + t0) for ivs in engines.values() for a, b in updates)
    training = sum(b - a for a, b in updates)
    lines.append(
        f"  engines idle {idle / (n * span):.0%} of the span, {idle_updating / n:.0f} s an engine during updates; "
        f"the trainer busy {training / span:.0%} of it"
    )
    tenths = []
    for k in range(10):
        a, b = t0 + span * k / 10, t0 + span * (k + 1) / 10
        tenths.append(1 - sum(busy(ivs, a, b) for ivs in engines.values()) / (n * (b - a)))
    lines.append("  engines idle by tenth of the span: " + " ".join(f"{x:.0%}" for x in tenths))
    versions = {0: 0.0} | {i + 1: f["time"] - t0 for i, f in enumerate(fits)}
    calls, batch, group = 0, None, None
    for b in batches:  # the scheduler's trace: streaming runs only
        for g in b["groups"]:
            most = max((len(v) for v in g["turn_versions"]), default=0)
            if most > calls:
                calls, batch, group = most, b, g
    if group is not None:
        admitted = versions.get(group["admitted_version"], float("nan"))
        lines.append(
            f"  longest trajectory: {calls} model calls, group {group['index']} admitted at version "
            f"{group['admitted_version']} (~{admitted:.0f} s), its batch handed over at {batch['time'] - t0:.0f} s: "
            f"{(batch['time'] - t0 - admitted) / calls:.2f} s a call"
        )
    ends = sorted((ivs[-1][1], name) for name, ivs in engines.items())
    if len(ends) > 1:
        alone = [y - x for x, y in engines[ends[-1][1]] if x > ends[-2][0]]
        if alone:
            lines.append(
                f"  {len(alone)} model calls with the other engines done: median {statistics.median(alone):.2f} s"
            )
    return lines


def main() -> None:
    runs = [Path(p) for p in sys.argv[1:]]
    if not runs:
        sys.exit(__doc__)
    for run in runs:
        if not (run / "ckpt" / "cpu_harness_fits.jsonl").is_file():
            print(f"{run}: no fit log (ckpt/cpu_harness_fits.jsonl); not a finished real-chain run", file=sys.stderr)
            continue
        print("\n".join(report(run)))


if __name__ == "__main__":
    main()
