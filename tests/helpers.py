"""What several test modules share: real servers on loopback, the wheel as pip builds it, scripted model turns,
the command line in a subprocess, and ASearcher's observation format written out from its code.

Fixtures built on these (the KB server, a scripted model server, a long KB page) are in conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import site
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from asearcher_plugin.engines.types import CompletionOutput, Logprob, RequestOutput, SamplingParams
from asearcher_plugin.settings.config import AgentConfig
from local_retriever.server_process import free_port

# --- real HTTP servers on loopback: uvicorn in a background thread on a free port ------------------------------


def stderr_until_pid(proc, pattern: str) -> tuple[list[str], int | None]:
    """The stderr lines of `proc` up to the first that matches `pattern` (its group 1 a pid), and that pid; the
    lines read and None when the process ends first."""
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if found := re.search(pattern, line):
            return seen, int(found.group(1))
    return seen, None


@contextlib.contextmanager
def serve_app(app, port: int | None = None, **options):
    """Serves an ASGI app until the block ends; yields its base URL. `options` go to `uvicorn.Config`."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **options)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"test server on port {port} did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# --- the project as a user gets it from pip: a wheel built from a copy of the source, installed into a directory --


ROOT = Path(__file__).resolve().parents[1]


def build_and_install(tmp_path: Path) -> tuple[Path, Path]:
    """(the wheel, the directory it is installed in with `pip install --target`); put the latter on sys.path."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("asearcher_plugin", "local_retriever", "data_synth", "recipes"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("asearcher_plugin-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return wheel, target


def install_in_fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new virtual environment with the wheel installed in it, as `pip install` leaves it; its Python.

    The checkout is not on its path. The dependencies are this environment's, named in a `.pth` file, so nothing is
    downloaded; this environment's editable install of the project is not among them (its finder is set up by a
    `.pth` file of its own, which a listed directory does not run).
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    return python


# --- the command line ---------------------------------------------------------------------------------------------


CLI = [sys.executable, "-m", "asearcher_plugin.cli"]


def run_cli(*args, timeout=600):
    """`asearcher ARGS` in a subprocess, as a user runs it."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


# --- scripted model turns, tokenized with the real tokenizer ------------------------------------------------------


class ScriptedEngine:
    """Stands in for the model to force exact turns: each call returns the next scripted turn,
    tokenized with the real tokenizer, shaped like vLLM's RequestOutput.

    A turn is (text, ending): "stop" ends at an action's closing tag (stop_reason is the stop
    string), "eos" appends the EOS token (stop_reason is its id, as HFEngine reports it),
    "eos-vllm" appends it with stop_reason None (vLLM's primary EOS), "eos-openai" has no EOS
    token and no stop_reason (an OpenAI-compatible server), "length" ran out of tokens.
    """

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns, self.calls = tokenizer, list(turns), []

    async def generate(self, prompt_token_ids, sampling_params):
        text, ending = self.turns[min(len(self.calls), len(self.turns) - 1)]
        self.calls.append(list(prompt_token_ids))
        ids = self.tokenizer(text=text, add_special_tokens=False)["input_ids"]
        finish, stop_reason = "stop", None
        if ending == "stop":
            stop_reason = next(s for s in ("</search>", "</access>", "</answer>") if text.endswith(s))
        elif ending == "eos":
            ids, stop_reason = ids + [self.tokenizer.eos_token_id], self.tokenizer.eos_token_id
        elif ending == "eos-vllm":
            ids = ids + [self.tokenizer.eos_token_id]
        elif ending == "length":
            finish = "length"
        logprobs = [{t: Logprob(-1.0)} for t in ids] if sampling_params.logprobs is not None else None
        return RequestOutput(
            "r", list(prompt_token_ids), [CompletionOutput(0, text, ids, finish, stop_reason, logprobs)]
        )


# --- `asearcher eval` against a scripted OpenAI-compatible model server -------------------------------------------


TOO_LONG = "TOOLONG"  # a question carrying this makes the model server refuse it, as vLLM does past its context


# Headless Chromium as the browser tests run it (scripts/test.sh installs it).
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class ScriptedModel:
    """OpenAI `/v1/completions` that answers each question with the answer scripted for it."""

    def __init__(self, tokenizer, answers: dict[str, str]):
        self.tokenizer, self.answers = tokenizer, answers
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()
        self.app = FastAPI()
        self.app.post("/v1/completions")(self.completions)

    async def completions(self, request: Request):
        body = await request.json()
        prompt = self.tokenizer.decode(body["prompt"])
        question = next((q for q in self.answers if q in prompt), None)
        with self.lock:
            self.calls[question] = self.calls.get(question, 0) + 1
        if question is not None and TOO_LONG in question:
            return JSONResponse(
                {
                    "object": "error",
                    "type": "BadRequestError",
                    "code": 400,
                    "message": "This model's maximum context length is 32768 tokens.",
                },
                status_code=400,
            )
        answer = self.answers.get(question, "unknown")
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": body["model"],
            "choices": [
                {"index": 0, "text": f"<think>known</think> <answer>{answer}</answer>", "finish_reason": "stop"}
            ],
        }


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GAIA = [
    {"id": "test_0", "question": "Which city is the capital of Angola?", "golden_answers": ["Luanda"]},
    {"id": "test_1", "question": "Which ocean lies west of Angola?", "golden_answers": ["Atlantic"]},
]
FRAMES = [
    {"id": "test_0", "question": "Who wrote An American in Paris?", "golden_answers": ["Gershwin"]},
    {"id": "test_1", "question": "Which prize did Einstein get in 1921?", "golden_answers": ["Nobel"]},
]


def run_eval(tmp_path, model, out, datasets=(), k=1, extra=()):
    """`asearcher eval` on `datasets` (and the flags in `extra`) against `model`, in a subprocess."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("agent:\n  agent_type: search-r1\n  max_turns: 2\n")
    args = [a for d in datasets for a in ("--dataset", str(d))] + list(extra)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "asearcher_plugin.cli",
            "eval",
            *args,
            "--k",
            str(k),
            "--out",
            str(out),
            "--agent-config",
            str(cfg),
            "--kb-url",
            f"http://127.0.0.1:{free_port()}",
            "--base-url",
            f"{model.url}/v1",
            "--model",
            "scripted",
            "--tokenizer",
            str(model.tokenizer.name_or_path),
            "--max-length",
            "1024",
            "--concurrency",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


# --- OpenRLHF's own samples generator on CPU ----------------------------------------------------------------------


def samples_generator_module():
    """OpenRLHF's real samples generator, imported on CPU with its GPU-only imports stubbed.

    The stubs, and the openrlhf modules imported against them, leave sys.modules again afterwards:
    a stub left in place would shadow the real vllm stand-in and OpenRLHF's Ray launcher for every
    later test in the session.
    """
    before = set(sys.modules)
    stubs = {}
    for name in ("ray", "vllm"):
        if name not in sys.modules:
            stubs[name] = types.ModuleType(name)
            stubs[name].SamplingParams = SamplingParams
    if "openrlhf.trainer.ray.vllm_engine" not in sys.modules:
        engine_mod = stubs["openrlhf.trainer.ray.vllm_engine"] = types.ModuleType("openrlhf.trainer.ray.vllm_engine")
        engine_mod.batch_vllm_engine_call = lambda *a, **k: None
    sys.modules.update(stubs)
    try:
        from openrlhf.trainer.ppo_utils import samples_generator
    finally:
        for name in set(sys.modules) - before:
            if name in stubs or name.startswith("openrlhf."):
                del sys.modules[name]
        package = sys.modules.get("openrlhf.trainer.ppo_utils")
        if package is not None and "openrlhf.trainer.ppo_utils.samples_generator" not in sys.modules:
            package.__dict__.pop("samples_generator", None)
    return samples_generator


# --- ASearcher's observation format (tests/test_observation_format.py says where each string comes from) ---------


QUESTION = "What is the capital of Angola?"
TOOL_STOPS = ["</search>", "</access>", "</answer>"]


def asearcher_search_text(rows: list[dict]) -> str:
    if not rows:
        return "<information>\nNo search results are found.\n</information>"
    docs = [f"[Doc {k + 1}]({row['url']}):\n" + row["contents"][:5000] for k, row in enumerate(rows)]
    return "<information>\n" + "\n\n".join(docs) + "\n</information>"


def asearcher_page_texts(page: str) -> list[tuple[str, str]]:
    """(text, short_text) of each chunk, as ASearcher queues them."""
    if page is None or page.strip() == "":
        text = "<information>\nNo More Information is Found for this URL.\n</information>"
        return [(text, text)]
    page, out = page[:250000], []
    while len(page) > 0 and len(out) < 10:
        n = min(25000, len(page))
        head = f"<information>\n>>>> Page {len(out) + 1} >>>>\n\n"
        out.append((head + page[:n] + "\n</information>", head + page[:100] + "\n</information>"))
        page = page[n:]
    return out


def appended(text: str) -> str:
    return "\n\n" + text + "\n<think>\n"


class TurnEngine:
    """The model's turns, scripted: each call returns the next text tokenized by the real tokenizer and
    records the prompt ids and stop strings it was given."""

    def __init__(self, tokenizer, turns: list[str]):
        self.tokenizer, self.turns, self.calls, self.stops = tokenizer, turns, [], []

    async def generate(self, prompt_token_ids, params):
        text = self.turns[len(self.calls)]
        self.calls.append(list(prompt_token_ids))
        self.stops.append(list(params.stop))
        ids = self.tokenizer(text=text, add_special_tokens=False)["input_ids"]
        stop = next((s for s in params.stop if text.endswith(s)), None)
        logprobs = [{t: Logprob(-0.5)} for t in ids] if params.logprobs is not None else None
        return RequestOutput(
            "r", list(prompt_token_ids), [CompletionOutput(0, text, ids, "stop" if stop else "length", stop, logprobs)]
        )


def asearcher_config(kb_server, **agent) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "agent_type": "asearcher",
            "max_turns": 20,
            "reward": {"format_factor": False},
            "tools": {"observation_format": "asearcher", "topk": 5, "local": {"urls": [kb_server]}},
            **agent,
        }
    )


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text=text, add_special_tokens=False)["input_ids"]


def execute(executor, tokenizer, engine, max_length=400_000, logprobs=None):
    params = SamplingParams(max_tokens=None, logprobs=logprobs)
    return asyncio.run(executor.execute(QUESTION, '["Luanda"]', params, max_length, tokenizer, engine))


def search_then_read_script(url: str, chunks: int) -> list[str]:
    """Search, summarise, open a page, summarise each of its chunks, answer."""
    return (
        [
            "<think>I should search.</think>\n<search>Angola capital</search>",
            "The results name Luanda.</think>",
            "\n<access>" + url + "</access>",
        ]
        + [f"Part {i} read.</think>" for i in range(1, chunks + 1)]
        + ["\n<answer>Luanda</answer>"]
    )


def expected_blocks(kb_server, url: str, page: str):
    hits = httpx.post(
        f"{kb_server}/retrieve", json={"queries": ["Angola capital"], "topk": 5, "return_scores": False}
    ).json()["result"][0]
    return asearcher_search_text(hits), asearcher_page_texts(page)
