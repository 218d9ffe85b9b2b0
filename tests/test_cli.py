"""The `asearcher kb` commands as a user runs them: real processes, real server."""

import json
import os
import subprocess
import sys

import pytest

from local_retriever.server_process import free_port, start_server, wait_healthy
from tests.helpers import run_cli


def flat(text: str) -> str:
    """Typer's error box as one line: a message wrapped at the terminal width reads whole again."""
    return " ".join(text.replace("│", " ").split())


def test_build_reports_skipped_lines_and_strict_fails_with_line_number(tmp_path):
    src = tmp_path / "corpus.jsonl"
    src.write_text(
        '{"id": "0", "contents": "\\"Luanda\\"\\nLuanda is the capital of Angola."}\n{broken\n'
        '{"id": "1", "title": "Oslo", "text": "Oslo is the capital of Norway."}\n'
    )
    ok = run_cli("kb", "build", str(src), "--out", str(tmp_path / "kb"), "--no-dense")
    assert ok.returncode == 0, ok.stderr
    assert "skipped_lines" in ok.stderr and "corpus.jsonl:2: invalid JSON" in ok.stderr
    strict = run_cli("kb", "build", str(src), "--out", str(tmp_path / "kb2"), "--no-dense", "--strict")
    assert strict.returncode == 2 and "corpus.jsonl:2" in strict.stderr and "Traceback" not in strict.stderr
    again = run_cli("kb", "build", str(src), str(tmp_path / "kb"), "--no-dense")  # the deprecated positional
    assert again.returncode == 2 and "--force" in again.stderr
    assert "note: the positional output folder is deprecated; use --out DIR" in again.stderr


def test_serve_refuses_bad_arguments_clearly(tmp_path):
    missing = run_cli("kb", "serve", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "not a knowledge base" in missing.stderr
    bad = run_cli("kb", "serve", str(tmp_path), "--retriever", "magic")
    assert bad.returncode == 2 and "'magic' is not one of 'dense', 'bm25', 'hybrid'" in flat(bad.stderr)


@pytest.mark.parametrize(
    "command, typo",
    [
        (["kb", "quickstart", "--retriever", "hybird", "--port", "1"], "hybird"),
        (["kb", "build", "sample", "--format", "jsonx"], "jsonx"),
        (["kb", "build", "sample", "--encoder-preset", "e6"], "e6"),
        (["kb", "build", "sample", "--pooling", "max"], "max"),
    ],
)
def test_a_typo_in_a_choice_is_refused_before_any_work(tmp_path, command, typo):
    out = tmp_path / "kb"
    result = run_cli(*command, "--out", str(out), timeout=120)
    assert result.returncode == 2 and "Invalid value for" in result.stderr, result.stderr[-2000:]
    assert f"'{typo}' is not one of" in flat(result.stderr)
    assert not out.exists()  # refused before the build started


def test_several_urls_are_a_repeated_flag_or_commas_alike():
    from local_retriever.options import split_list

    assert split_list(["http://a:1,http://b:2", " http://c:3 "]) == ["http://a:1", "http://b:2", "http://c:3"]
    assert split_list(["http://a:1", "http://b:2"]) == split_list(["http://a:1,http://b:2"])
    assert split_list([]) == split_list(None) == split_list([" , "]) == []


def test_serve_and_query_processes(sample_kb):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(sample_kb, port, "bm25")
    try:
        health = wait_healthy(url, proc)
        assert health["retriever"] == "bm25" and health["corpus_size"] > 1000
        out = run_cli("kb", "query", "Who wrote A Modest Proposal?", "--url", url, "--topk", "2", "--json")
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result[0][0]["document"]["title"] == "A Modest Proposal"
        # a dead server first, given either way: the client fails over to the live one in both spellings
        dead = f"http://127.0.0.1:{free_port()}"
        for urls in (["--url", f"{dead},{url}"], ["--url", dead, "--url", url]):
            again = run_cli("kb", "query", "Who wrote A Modest Proposal?", *urls, "--topk", "2", "--json")
            assert again.returncode == 0, again.stderr
            assert json.loads(again.stdout) == result
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_kb_quickstart_serves_and_asks_the_sample_questions(sample_kb, tmp_path):
    import os
    import shutil
    import signal

    from tests.helpers import CLI, stderr_until_pid

    kb = tmp_path / "kb"
    shutil.copytree(sample_kb, kb)  # reuse the test run's build: the quickstart only builds when the folder is empty
    port = free_port()
    cmd = [*CLI, "kb", "quickstart", "--out", str(kb), "--port", str(port), "--retriever", "bm25", "--keep-serving"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    child = None
    try:
        seen, child = stderr_until_pid(proc, r"server running \(pid (\d+)\)")  # the server stays up
        err = "".join(seen)
        assert child is not None, err[-2000:]
        assert "78 questions: recall@1" in err and "reusing the knowledge base" in err
        assert "/access 'Angola' -> https://en.wikipedia.org/wiki/Angola" in err
        assert f"try it: curl -s http://127.0.0.1:{port}/retrieve -H 'content-type: application/json' -d" in err
        # `kill PID` of the quickstart stops the server it started, not only itself
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        # the quickstart waits for its server before it exits: once it is gone, so is the server (else it would still
        # run, adopted by init)
        assert not os.path.exists(f"/proc/{child}"), f"the server (pid {child}) outlived the quickstart's SIGTERM"
    finally:
        proc.kill()
        if child is not None and os.path.exists(f"/proc/{child}"):
            os.kill(child, signal.SIGKILL)


def dry_run_without(hide: str, recipe: str, cwd):
    """`asearcher train RECIPE --dry-run` in a Python where `hide` (code run first) made some modules missing."""
    code = hide + "from asearcher_plugin.cli import main; main()"
    command = [sys.executable, "-c", code, "train", recipe, "--dry-run"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


def test_train_without_openrlhf_names_the_extra_in_one_line(tmp_path):
    recipe = "cpu_tiny"  # the packaged recipe, by name
    hide = "import sys; sys.modules.update(dict.fromkeys(['openrlhf', 'vllm', 'deepspeed'])); "  # as if not installed
    out = dry_run_without(hide, str(recipe), tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert [line for line in out.stderr.splitlines() if "pip install 'asearcher-plugin[train]'" in line], out.stderr
    assert "to check recipes only: pip install --no-deps openrlhf==0.11.2 pylatexenc" in out.stderr


@pytest.mark.parametrize("missing", ["pylatexenc"])
def test_a_dry_run_on_openrlhf_without_its_parser_imports_says_what_to_install(tmp_path, missing):
    """`pip install --no-deps openrlhf` leaves out what its parser's block imports (openrlhf.utils -> pylatexenc)."""
    hide = f"import sys; sys.modules[{missing!r}] = None; "  # as if not installed
    out = dry_run_without(hide, "cpu_tiny", tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = [line for line in out.stderr.splitlines() if line.strip()]
    assert f"OpenRLHF's parser needs {missing}, not installed" in line
    assert "pip install --no-deps openrlhf==0.11.2 pylatexenc" in line


def test_a_command_reaching_a_train_only_module_says_which_extra(monkeypatch, capsys):
    from asearcher_plugin import cli

    def needs_vllm():
        raise ModuleNotFoundError("No module named 'vllm.engine'", name="vllm.engine")

    monkeypatch.setattr(cli, "app", needs_vllm)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "error: vllm is not installed; it comes with the [train] extra: pip install 'asearcher-plugin[train]'\n"
    )

    def broken_install():
        raise ModuleNotFoundError("No module named 'faiss'", name="faiss")

    monkeypatch.setattr(cli, "app", broken_install)
    with pytest.raises(ModuleNotFoundError):  # a base dependency missing is a broken install: the traceback stays
        cli.main()


def test_eval_set_overrides_the_agent_config_and_is_validated():
    from asearcher_plugin.settings.config import AgentConfig, ConfigError, override_agent_config

    base = AgentConfig(max_turns=4)
    cfg = override_agent_config(base, ["agent.max_turns=16", "agent.tools.local.urls=[http://a:1, http://b:2]"])
    assert cfg.max_turns == 16 and cfg.tools.local.urls == ["http://a:1", "http://b:2"] and base.max_turns == 4
    for item, problem in [
        ("agent.max_turns=abc", "max_turns: Input should be a valid integer"),
        ("agent.max_trns=3", "max_trns: Extra inputs are not permitted"),
        ("scheduler.max_staleness=2", "only agent.* keys apply here"),
        ("agent.max_turns", "--set expects key=value"),
    ]:
        with pytest.raises(ConfigError, match=problem):
            override_agent_config(base, [item])


@pytest.mark.parametrize(
    "item, problem",
    [
        ("agent.max_turns=abc", "max_turns: Input should be a valid integer"),
        ("agent.tools.topk=0", "tools.topk: Input should be greater than"),
    ],
)
def test_eval_refuses_a_bad_set_before_loading_anything(tmp_path, item, problem):
    out = run_cli(
        "eval", "--hf-model", str(tmp_path / "no-model"), "--set", item, "--out", str(tmp_path / "eval"), timeout=120
    )
    assert out.returncode == 2 and problem in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "eval").exists()


def test_eval_set_is_applied_to_the_run(tmp_path, model_server):  # noqa: F811 (the fixture imported above)
    from tests.helpers import GAIA, write_jsonl

    data = write_jsonl(tmp_path / "gaia.jsonl", GAIA)
    out = tmp_path / "eval"
    done = run_cli(
        "eval",
        "--dataset",
        str(data),
        "--out",
        str(out),
        "--set",
        "agent.agent_type=asearcher",
        "--set",
        "agent.max_turns=2",
        "--kb-url",
        f"http://127.0.0.1:{free_port()}",
        "--base-url",
        f"{model_server.url}/v1",
        "--model",
        "scripted",
        "--tokenizer",
        str(model_server.tokenizer.name_or_path),
        "--max-length",
        "1024",
        "--concurrency",
        "2",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # the ASearcher-style aggregate file is named after the agent type the run used
    assert (out / "aggregate_results_asearcher_asearcher_async-search-access_t0.6.json").is_file()


def test_every_option_and_argument_of_every_command_has_help():
    import typer.main

    from asearcher_plugin.cli import app

    def commands(cmd, path):
        if hasattr(cmd, "commands"):  # a group (typer carries its own copy of click's classes)
            if any(p.name != "help" for p in cmd.params):  # a group that runs itself too (`eval`)
                yield " ".join(path), cmd
            for name, sub in cmd.commands.items():
                yield from commands(sub, [*path, name])
        else:
            yield " ".join(path), cmd

    found = dict(commands(typer.main.get_command(app), []))
    assert {
        "kb build",
        "kb serve",
        "kb query",
        "kb quickstart",
        "synth",
        "eval",
        "eval compare",
        "train",
        "rollout",
    } <= set(found)
    bare = [
        f"{name} {p.name}"
        for name, cmd in found.items()
        for p in cmd.params
        if not getattr(p, "hidden", False) and not getattr(p, "help", None) and p.name != "help"
    ]
    assert bare == []


def test_train_cpu_tiny_makes_its_local_inputs_in_a_fresh_folder(tmp_path, monkeypatch):
    """`asearcher train cpu_tiny --cpu` right after install: the tiny model and the sample prompts the recipe names are
    made before OpenRLHF starts (OpenRLHF used to stop on the missing prompts file after its start-up)."""
    from typer.testing import CliRunner

    from asearcher_plugin import launch
    from asearcher_plugin.cli import app

    started = []
    monkeypatch.setattr(launch, "run_openrlhf", lambda argv, config, cpu=False: started.append(cpu))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", "cpu_tiny", "--cpu"])
    assert result.exit_code == 0, result.output
    assert started == [True]
    prompts = (tmp_path / "runs" / "sample_prompts.jsonl").read_text().splitlines()
    assert prompts and all("question" in json.loads(line) for line in prompts)
    assert (tmp_path / "runs" / "tiny-model" / "config.json").is_file()


def test_train_refuses_a_missing_local_input_before_anything_starts(tmp_path, monkeypatch):
    """A recipe's prompt file or model folder that is not there is named in one line before Ray starts (OpenRLHF
    found it missing only after its start-up); a hub name (`org/name`) is left to OpenRLHF."""
    from typer.testing import CliRunner

    from asearcher_plugin import launch
    from asearcher_plugin.cli import app
    from asearcher_plugin.commands.local_inputs import missing_local_paths

    started = []
    monkeypatch.setattr(launch, "run_openrlhf", lambda argv, config, cpu=False: started.append(cpu))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", "local_7b_1node"])
    assert result.exit_code == 2 and not started
    assert "openrlhf.data.prompt_dataset: data/asearcher_base_35k.jsonl not found" in result.output
    assert "actor.model_name_or_path" not in result.output  # Qwen/Qwen2.5-7B: a hub name
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "asearcher_base_35k.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    assert CliRunner().invoke(app, ["train", "local_7b_1node"]).exit_code == 0 and started == [False]
    no_eval = CliRunner().invoke(app, ["train", "local_7b_1node", "--set", "openrlhf.eval.dataset=data/eval.jsonl"])
    assert no_eval.exit_code == 2 and "openrlhf.eval.dataset: data/eval.jsonl not found" in no_eval.output
    assert started == [False]
    assert missing_local_paths({"m": "./models/mine", "d": "org/data.jsonl", "h": "org/name", "e": None}) == [
        f"m: ./models/mine not found (a local path, read from {tmp_path})",
        f"d: org/data.jsonl not found (a local path, read from {tmp_path})",
    ]


LEAVE_SCRIPT = """
import atexit, sys
from asearcher_plugin import cli, launch

def fake_run(argv, config, cpu=False):
    from asearcher_plugin.openrlhf.run_end import note_run_ended
    if {ended}:
        note_run_ended()
    print("run output", flush=False)  # buffered: leaving must still flush it
    if {fail}:
        raise RuntimeError("the run failed")

launch.run_openrlhf = fake_run
launch.rollout_failure = lambda exc: "the run's own reason"
atexit.register(lambda: print("interpreter torn down"))
sys.argv = ["asearcher", "train", "cpu_tiny", "--cpu"]
cli.main()
"""


@pytest.mark.parametrize(("ended", "fail", "code"), [(True, False, 0), (True, True, 1), (False, False, 0)])
def test_the_console_script_leaves_at_once_after_a_run_with_its_code_and_output(tmp_path, ended, fail, code):
    """After a run of OpenRLHF the console script ends without finalising its interpreter (seconds for torch,
    vLLM and DeepSpeed), with the command's exit code and every line it wrote; without a run it ends as usual."""
    script = LEAVE_SCRIPT.format(ended=ended, fail=fail)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # output to a pipe is buffered then
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env
    )
    assert proc.returncode == code, proc.stderr[-2000:]
    assert "run output" in proc.stdout
    if fail:
        assert "error: cpu_tiny: the run's own reason" in proc.stderr
    assert ("interpreter torn down" in proc.stdout) is not ended
