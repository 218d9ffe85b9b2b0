"""The README, docs/getting-started.md and docs/tools.md followed as a new user follows them: the quickstart, then
every command of their `bash` blocks in order (a file a page has the reader save written first), from the folder the
quickstart wrote `runs/` into, with the knowledge-base server started as the README says.

Each command must end with status 0 and no traceback, within its stated time (the `~N s`, `~N min` or `seconds` of
its comment) with a wide margin: the slack is for shared CI cores, the limit is for a command that would run for
hours. Not run here: the environment set-up that CI's `scripts/test.sh` performs itself (the virtual environment,
the `pip install` lines, whose packages are checked instead), the suite itself, and a command that needs an extra
and has its own test (it must name that extra). Fixed ports are replaced by free ones.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from local_retriever.server_process import free_port, wait_until_up
from tests.helpers import stderr_until_pid

# the quickstart and the tour together take minutes on 2 shared cores: more than the suite's default per test
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "docs/getting-started.md", "docs/tools.md"]
SET_UP = ("python3 -m venv", ". .venv/bin/activate", "sh scripts/test.sh", "sh scripts/install-cpu-harness.sh")
# command -> (what its comment must name for the install it needs, the test that runs it)
OWN_TEST = {"asearcher train cpu_tiny --cpu": ("scripts/install-cpu-harness.sh", "tests/test_openrlhf_train_cpu.py")}
QUICKSTART = "asearcher quickstart"


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
    if found := re.search(r"~\s*(\d+)\s*(s|min)\b", comment):
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


def test_every_command_of_the_readme_and_getting_started_runs_in_order(quickstart):
    home = quickstart[0]
    ports = {"5005": str(free_port()), "8000": str(free_port())}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    background: list[subprocess.Popen] = []
    ran, checked = [], []
    try:
        for page in PAGES:
            for name, code in page_files(page).items():
                (home / name).write_text(code)
            for line in page_commands(page):
                for part in (p.strip() for p in line.partition(" #")[0].split(" && ")):
                    if part.startswith(SET_UP):
                        continue
                    if part.startswith("pip install"):  # CI's scripts/test.sh installs these; they must be there
                        missing = [name for name in package_names(part) if not installed(name)]
                        assert not missing, f"{page}: `{part}`: not installed: {missing}"
                        checked.append(part)
                        continue
                    if part == QUICKSTART:  # the fixture ran it
                        continue
                    if part in OWN_TEST:
                        extra, test = OWN_TEST[part]
                        assert extra in line, f"{page}: `{part}` needs {extra} and must say so"
                        assert (ROOT / test).is_file()
                        continue
                    command = re.sub(r"\b(5005|8000)\b", lambda m: ports[m.group(1)], part)
                    if command.endswith("&"):
                        background.append(start(command.rstrip("& "), home, env, line, page))
                    else:
                        run(command, home, env, line, page)
                    ran.append(part)
    finally:
        for proc in background:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    # the tour's commands ran, and the eval example wrote its report
    assert any(c.startswith("asearcher kb query") for c in ran) and any(c.startswith("asearcher eval") for c in ran)
    assert any(c.startswith("asearcher train local_7b_1node --dry-run") for c in ran) and checked
    assert json.loads((home / "runs" / "eval-tour" / "metrics.json").read_text())["items_ok"] == 10
    # the tools page: its calculator, saved as the page says, offered to every trajectory of its eval
    assert any(c.startswith("PYTHONPATH=. asearcher tool my_tools:calculator") for c in ran)
    rows = [
        json.loads(line) for line in (home / "runs" / "eval-tools" / "trajectories.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 5 and all(r["status"] == "ok" and '"name": "calculator"' in r["text"] for r in rows)


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
