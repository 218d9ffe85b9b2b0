"""The README and the pages of PAGES followed as a new user follows them: the quickstart, then every command of their
`bash` blocks in order (a file a page has the reader save written first), from a folder laid out as the repository
root after the quickstart (its `runs/`, with `benchmarks/` and `recipes/` beside it), with the knowledge-base servers
the pages start. Together: the tour, custom tools, `asearcher train cpu_tiny --cpu`, and the warm start then RL.

Each command must end with status 0 and no traceback, within its stated time (the `~N s`, `~N min` or `seconds` of
its comment) with a wide margin: the slack is for shared CI cores, the limit is for a command that would run for
hours. A long run may be shortened by what its comment says the walkthrough test adds (`--set
openrlhf.data.max_samples=4`, `--limit 10`: the same path, fewer steps or items). Not run here: the environment
set-up that CI's `scripts/test.sh` performs itself (the virtual environment, the `pip install` lines, whose packages
are checked instead) and the suite itself. Fixed ports are replaced by free ones; a recipe's KB address by the
page's server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from local_retriever.server_process import free_port, wait_until_up
from tests.helpers import stderr_until_pid

# the quickstart and the tour together take minutes on 2 shared cores: more than the suite's default per test
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "docs/getting-started.md", "docs/tools.md", "docs/training.md", "docs/warm-start.md"]
SET_UP = ("python3 -m venv", ". .venv/bin/activate", "sh scripts/test.sh", "sh scripts/install-cpu-harness.sh")
HARNESS = "scripts/install-cpu-harness.sh"  # what a page must name beside a `--cpu` command it does not run itself
# a command several pages show -> the page that runs it (the one that says what to expect from it)
RUN_ON = {"asearcher train cpu_tiny --cpu": "docs/training.md"}
QUICKSTART = "asearcher quickstart"
ENV_PREFIX = r"^(?:\w+=\S* )+"  # `PYTHONPATH=. asearcher ...`: variables set for one command


def page_commands(page: str) -> list[str]:
    """The lines of the page's ```bash blocks, comments kept, in order."""
    text = (ROOT / page).read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def page_files(page: str) -> dict[str, str]:
    """The page's ```python blocks that open with `# NAME.py`: files the page has the reader save (docs/tools.md's
    my_tools.py), by name."""
    text = (ROOT / page).read_text()
    return dict(re.findall(r"^```python\n# (\w+\.py)\n(.*?)^```", text, re.S | re.M))


def stated_seconds(line: str) -> float | None:
    comment = line.partition("#")[2]
    if found := re.search(r"~\s*(\d+(?:\.\d+)?)\s*(s|min)\b", comment):
        return float(found.group(1)) * (60 if found.group(2) == "min" else 1)
    return 10.0 if re.search(r"\bseconds\b", comment) else None


def package_names(pip_line: str) -> list[str]:
    """The distributions a `pip install` line names; `.` (or `.[extra]`) is this project."""
    words, names = shlex.split(pip_line.partition("#")[0])[2:], []
    for before, word in zip(["", *words], words):
        if word.startswith("-") or before in ("-c", "--constraint", "-r", "--requirement"):
            continue
        names.append("asearcher-plugin" if word.startswith(".") else re.split(r"[=<>\[]", word)[0])
    return names


@pytest.fixture(scope="module")
def quickstart(sample_kb, tiny_model, tmp_path_factory):
    """`asearcher quickstart --keep-serving` on 3 questions once, its KB build and tiny model taken from the suite's,
    stopped with SIGTERM once it says its server stays up; (folder, its stderr, the server's pid)."""
    import shutil

    home = tmp_path_factory.mktemp("newcomer")
    shutil.copytree(sample_kb, home / "runs" / "sample-kb")  # the KB build has its own tests; reuse it
    shutil.copytree(tiny_model, home / "runs" / "tiny-model")  # and so has the tiny model
    cmd = [sys.executable, "-m", "asearcher_plugin.cli", "quickstart", "--port", str(free_port())]
    cmd += ["--questions", "3", "--k", "1", "--keep-serving"]
    proc = subprocess.Popen(cmd, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server = None
    try:
        seen, server = stderr_until_pid(proc, r"knowledge base still serving at \S+ \(pid (\d+)\)")
        assert server is not None, "".join(seen)[-3000:]
        proc.send_signal(signal.SIGTERM)  # as `kill PID`
        rest = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
        if server is not None and os.path.exists(f"/proc/{server}"):
            os.kill(server, signal.SIGKILL)
    return home, "".join(seen) + rest, server, proc.returncode


def test_quickstart_runs_the_whole_path_and_leads_with_the_agent_at_work(quickstart):
    home, err, server, status = quickstart
    # stopped with SIGTERM while it kept serving: a clean end, and its server went with it
    assert status == 0, err[-3000:]
    assert not os.path.exists(f"/proc/{server}"), f"the server (pid {server}) outlived the quickstart's SIGTERM"
    runs = home / "runs"
    assert len((runs / "rollout" / "trajectories.jsonl").read_text().splitlines()) == 3 * 2 * 2
    assert json.loads((runs / "eval" / "metrics.json").read_text())["items_ok"] == 3
    assert "untrained random model" in (runs / "eval" / "summary.md").read_text().splitlines()[2]
    # Beside the tiny model, the scripted reference policy: trajectories that search, read a page and answer.
    ref = json.loads((runs / "eval-reference" / "metrics.json").read_text())
    assert ref["items_ok"] == 3 and ref["card"]["model"]["engine"] == "scripted reference policy"
    dist = ref["datasets"]["overall"]["distributions"]
    assert dist["searches"]["mean"] == 1 and dist["accesses"]["mean"] == 1
    assert ref["datasets"]["overall"]["f1"]["pass@1"] > 0
    # The last lines: the policy's report first, the random model's beside it, how to get the server back; each
    # whole on its line (copied and pasted), with no log noise before them.
    lines = err.splitlines()
    lead = next(i for i, line in enumerate(lines) if line.startswith("report, the agent at work"))
    assert lines[lead].startswith("report, the agent at work (scripted reference policy")
    assert lines[lead].endswith(str((runs / "eval-reference" / "report.html").resolve()))
    assert lines[lead + 1].startswith("report beside it (tiny random model")
    assert lines[lead + 1].endswith(str((runs / "eval" / "report.html").resolve()))
    # then the kept server (the line may come twice: rich writes it again when the test's SIGTERM lands while it
    # is being written), and last how to serve the knowledge base again
    assert {line for line in lines[lead + 2 : -1]} == {lines[lead + 2]}
    assert lines[lead + 2].startswith("knowledge base still serving at http://127.0.0.1:")
    assert "--keep-serving" in lines[-1] and lines[-1].endswith("--retriever hybrid")
    assert any(line.startswith("scripted reference policy: 3 items, F1 Avg@1") for line in lines)
    for noise in ("DEBUG", "FutureWarning", "past_key_values", "Started a local Ray instance"):
        assert noise not in err, noise


@pytest.fixture(scope="module")
def walk(quickstart, request):
    """Every command of PAGES run in order in the quickstart's folder; (folder, the commands run as (page, command,
    seconds), the ports that stand for the pages' fixed ones). Servers a page starts stay up until the module ends,
    but one started on a port an earlier server holds replaces it, as the pages tell the reader to do."""
    home = quickstart[0]
    for folder in ("benchmarks", "recipes"):  # the pages run from the repository root, beside the quickstart's runs/
        (home / folder).symlink_to(ROOT / folder)
    ports = {"5005": str(free_port()), "8000": str(free_port())}
    env = command_env()
    background: dict[str, subprocess.Popen] = {}
    ran: list[tuple[str, str, float]] = []
    try:
        for page in PAGES:
            for name, code in page_files(page).items():
                (home / name).write_text(code)
            for line in page_commands(page):
                for part in (p.strip() for p in line.partition(" #")[0].split(" && ")):
                    if (
                        part.startswith(SET_UP) or part == QUICKSTART
                    ):  # CI does the set-up; the fixture ran the quickstart
                        continue
                    if part.startswith("pip install"):  # CI's scripts/test.sh installs these; they must be there
                        missing = [name for name in package_names(part) if not installed(name)]
                        assert not missing, f"{page}: `{part}`: not installed: {missing}"
                        continue
                    if part in RUN_ON and RUN_ON[part] != page:
                        assert HARNESS in line, f"{page}: `{part}` needs {HARNESS} and must say so"
                        continue
                    command = re.sub(r"\b(5005|8000)\b", lambda m: ports[m.group(1)], part)
                    command += variant(line)
                    if re.sub(ENV_PREFIX, "", command).startswith("asearcher train ") and "--dry-run" not in command:
                        # the recipe's KB address is the page's fixed port
                        command += f" --set agent.tools.local.urls=[http://127.0.0.1:{ports['5005']}]"
                    started = time.monotonic()
                    if command.endswith("&"):
                        port = re.search(r"--port (\d+)", command)
                        assert port, f"{page}: `{command}`: a server started in the background names its --port"
                        if old := background.pop(port.group(1), None):
                            stop(old)
                        background[port.group(1)] = start(command.rstrip("& "), home, env, line, page)
                    else:
                        run(command, home, env, line, page)
                    ran.append((page, part, time.monotonic() - started))
        # the time of each documented path, in the test run's own output (CI's log shows it)
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():  # past pytest's capture of the fixture's output
                reporter.write_line("\n" + timing_table(ran))
        yield home, ran, ports
    finally:
        for proc in background.values():
            stop(proc)


def command_env() -> dict:
    """The environment the pages' commands run in: this interpreter's scripts first on PATH, as after activation."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def variant(line: str) -> str:
    """What a page's comment says the walkthrough adds to its command (a smaller run of the same path): its
    `(the walkthrough test adds `ARGS`)`."""
    found = re.search(r"the walkthrough test adds `([^`]+)`", line.partition(" #")[2])
    return f" {found.group(1)}" if found else ""


def timing_table(ran: list[tuple[str, str, float]]) -> str:
    rows = [f"| {page} | `{command[:90]}` | {seconds:.0f} |" for page, command, seconds in ran]
    totals = {page: sum(s for p, _, s in ran if p == page) for page in dict.fromkeys(p for p, _, _ in ran)}
    rows += [f"| {page} | all of its commands | {seconds:.0f} |" for page, seconds in totals.items()]
    return "\n".join(["| page | command | s |", "|---|---|---|", *rows])


def test_every_command_of_every_page_runs_in_order(walk):
    home, ran, _ = walk
    commands = [command for _, command, _ in ran]
    # the tour's commands ran, and the eval example wrote its report
    assert any(c.startswith("asearcher kb query") for c in commands)
    assert any(c.startswith("asearcher train local_7b_1node --dry-run") for c in commands)
    assert json.loads((home / "runs" / "eval-tour" / "metrics.json").read_text())["items_ok"] == 10
    # the tools page: its calculator, saved as the page says, offered to every trajectory of its eval
    assert any(c.startswith("PYTHONPATH=. asearcher tool my_tools:calculator") for c in commands)
    rows = [
        json.loads(line) for line in (home / "runs" / "eval-tools" / "trajectories.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 5 and all(r["status"] == "ok" and '"name": "calculator"' in r["text"] for r in rows)
    # a command more than one page shows ran on the page that says what to expect from it
    for command, page in RUN_ON.items():
        assert (page, command) in [(p, c) for p, c, _ in ran], f"{page} did not run `{command}`"
    # training.md's cpu_tiny: OpenRLHF's real training, the model where the page says
    assert (home / "runs" / "train" / "final" / "config.json").is_file()


def test_the_warm_start_page_trains_on_the_teachers_decisions_and_rl_starts_from_its_model(walk):
    """docs/warm-start.md as written, shortened as its comments say: the decision task's three kinds, the teacher's
    trajectories as token rows, SFT that makes the teacher's held-out sequences likelier than the copier found them
    (questions it never trained on), and RL from its model, each model evaluated."""
    home, _, _ = walk
    warm = home / "runs" / "warm"
    kinds = {json.loads(line)["kind"] for line in (warm / "heldout.jsonl").read_text().splitlines()}
    assert kinds == {"read", "both", "none"}, kinds
    config = json.loads((warm / "sft-model" / "config.json").read_text())
    assert config["num_hidden_layers"] == 4, config  # the student `make-tiny-model --layers 4` made
    heldout = [json.loads(line) for line in (warm / "sft-data" / "heldout.jsonl").read_text().splitlines()]
    assert heldout, "sft-data kept no held-out sequence"
    copier, start = (loss_on(warm / name, heldout) for name in ("tiny-copy", "sft-model"))
    assert start < copier - 0.5, (copier, start)  # nats a generated token: measured 8.73 -> 6.91
    for run_dir in ("eval-copier", "eval-sft", "eval-rl"):  # `--limit 10` added, k = 2
        metrics = json.loads((warm / run_dir / "metrics.json").read_text())
        assert metrics["items_ok"] == 20, (run_dir, metrics)
    assert (warm / "rl" / "final" / "config.json").is_file()


def loss_on(model_dir: Path, rows: list[dict]) -> float:
    """Mean negative log-likelihood of the tokens the teacher generated (`loss_mask` 1), in nats."""
    import torch
    from transformers import AutoModelForCausalLM

    from benchmarks.warm_start_tokens import scored

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    taught = [(lp, m) for row in rows for lp, m in zip(scored(model, row["input_ids"]), row["loss_mask"][1:])]
    return -sum(lp for lp, m in taught if m) / sum(m for _, m in taught)


def installed(name: str) -> bool:
    try:
        version(name)
    except PackageNotFoundError:
        return False
    return True


def limit(line: str, page: str) -> float:
    seconds = stated_seconds(line)
    assert seconds is not None, f"{page}: `{line}` states no time (a `~N s`, `~N min` or `seconds` comment)"
    return max(10 * seconds, 300.0)


def run(command: str, home: Path, env: dict, line: str, page: str) -> None:
    out = subprocess.run(
        command, shell=True, capture_output=True, text=True, timeout=limit(line, page), cwd=home, env=env
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, f"{page}: `{command}`:\n{out.stderr[-3000:]}"


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def start(command: str, home: Path, env: dict, line: str, page: str) -> subprocess.Popen:
    """A server the page starts in the background: up once it answers HTTP on its port."""
    import httpx

    port = re.search(r"--port (\d+)", command)
    assert port, f"{page}: `{command}`: a server started in the background names its --port"
    proc = subprocess.Popen(  # exec: the signal that ends the test reaches the server, not a shell
        f"exec {command}", shell=True, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_until_up(proc, lambda: httpx.get(f"http://127.0.0.1:{port.group(1)}/", timeout=2), command, limit(line, page))
    return proc
