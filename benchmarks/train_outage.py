"""The training-outage scenario of `benchmarks/faults.py`: the KB server down for a stated time in a training run.

A full `asearcher train cpu_tiny --cpu` run (OpenRLHF 0.11.2's own `train()`, real vLLM engines, OpenRLHF's
DeepSpeed policy actor on CPU) with the streaming scheduler, on the scripted workload of the CPU harness
(asearcher_plugin/openrlhf/cpu/workload.py: 1-8 turns a trajectory, every turn but the last a real search of the
sample KB, each turn 1 s besides its decode). The `asearcher kb serve` process is killed with SIGKILL once the
first batch has been handed to the trainer and started again on the same port `outage_s` later. Counted from what
reached the trainer (the harness's fit log) and from the scheduler's trace: groups re-run, trajectories
discarded, and samples trained with an infrastructure failure (the bar: 0).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

WORKLOAD = {"max_turns": 8, "turns_scale": 2.0, "pareto_alpha": 1.0, "tokens_per_turn": 4, "turn_seconds": 1.0}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def command(work: Path, model: Path, prompts: Path, kb_url: str, *extra: str) -> list[str]:
    """The training run of this scenario (also started by the outage tests in tests/test_openrlhf_train_cpu.py):
    the scripted workload against `kb_url`, whose client gives up after one retry, so trajectories in flight
    during an outage meet ToolUnavailable. `extra`: more `--set` values."""
    from asearcher_plugin.openrlhf.cpu import scripted

    sets = [
        f"openrlhf.actor.model_name_or_path={model}",
        f"openrlhf.data.prompt_dataset={prompts}",
        f"openrlhf.train.agent_func_path={scripted.__file__}",
        f"agent.tools.local.urls=[{kb_url}]",
        "agent.tools.local.retries=1",
        "agent.tools.local.timeout=5",
        "agent.tools.topk=1",
        "agent.tools.max_doc_chars=50",
        "agent.max_turns=8",
        "openrlhf.data.max_len=8000",
        f"openrlhf.ckpt.path={work / 'ckpt'}",
        f"openrlhf.ckpt.output_dir={work / 'final'}",
        f"scheduler.trace={work / 'trace.jsonl'}",
        f"cpu_harness.workload={json.dumps(WORKLOAD)}",
        *extra,
    ]
    cmd = [sys.executable, "-m", "asearcher_plugin.cli", "train", "cpu_tiny", "--cpu"]
    return [*cmd, *[x for s in sets for x in ("--set", s)]]


def run(kb: Path, work: Path, prompts: int, outage_s: float) -> tuple[list, dict]:
    from asearcher_plugin.engines.tiny_model import ensure_tiny_model
    from local_retriever.sample import load_sample_questions
    from local_retriever.server_process import start_server, wait_healthy

    work.mkdir(parents=True, exist_ok=True)
    model = Path(ensure_tiny_model("runs/tiny-model")).resolve()
    questions = load_sample_questions()[:prompts]
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({k: q[k] for k in ("question", "golden_answers")}) + "\n" for q in questions))
    for name in ("trace.jsonl", "ckpt"):
        subprocess.run(["rm", "-rf", str(work / name)], check=True)
    port = _port()
    url = f"http://127.0.0.1:{port}"
    env = os.environ
    server = start_server(kb, port, "bm25")
    wait_healthy(url, server)
    with open(work / "train.log", "w") as log:
        proc = subprocess.Popen(
            command(work, model, data, url), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work
        )
        try:
            while not any(r["groups"] for r in _jsonl(work / "trace.jsonl")):
                if proc.poll() is not None:
                    raise SystemExit(f"training ended before its first batch, see {work / 'train.log'}")
                time.sleep(0.5)
            server.kill()
            server.wait()
            down_at = time.monotonic()
            time.sleep(outage_s)
            server = start_server(kb, port, "bm25")
            wait_healthy(url, server)
            down_for = time.monotonic() - down_at
            code = proc.wait()
        finally:
            proc.kill()
            server.kill()
    if code != 0:
        raise SystemExit(f"training failed, see {work / 'train.log'}")
    trace, fits = _jsonl(work / "trace.jsonl"), _jsonl(work / "ckpt" / "cpu_harness_fits.jsonl")
    infos = [exp["info"] for fit in fits for exp in fit["experiences"]]
    trained = sum(len(info["reward"]) for info in infos)
    with_failure = sum(v > 0 for info in infos for v in info["tool_errors_infra"])
    stats = trace[-1]["stats"]
    result = {
        "kb_down_s": round(down_for, 1),
        "breaker_outage_s": round(trace[-1]["outage_seconds"], 1),
        "groups_rerun": stats["outage_reruns"],
        "trajectories_discarded": stats["outage_discarded"],
        "trained": trained,
        "trained_with_infra_failure": with_failure,
        "steps": len(fits),
    }
    row = [
        "KB down mid-training",
        f"asearcher train cpu_tiny --cpu, {prompts} prompts x n=2",
        trained,
        with_failure,
        f"**{with_failure}**",
        f"KB killed -9 after the first batch, back after {down_for:.0f} s (breaker open "
        f"{result['breaker_outage_s']:.0f} s); {stats['outage_reruns']} groups re-run, "
        f"{stats['outage_discarded']} trajectories discarded; "
        "failed = lost = trained samples with an infrastructure failure",
    ]
    return [row], result
