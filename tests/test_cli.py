"""The `asearcher kb` commands as a user runs them: real processes, real server."""

import json
import subprocess
import sys

import pytest

from local_retriever.quickstart import start_server, wait_healthy
from tests.http_helpers import free_port

CLI = [sys.executable, "-m", "asearcher_plugin.cli"]


def run(*args, timeout=600):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_build_reports_skipped_lines_and_strict_fails_with_line_number(tmp_path):
    src = tmp_path / "corpus.jsonl"
    src.write_text('{"id": "0", "contents": "\\"Luanda\\"\\nLuanda is the capital of Angola."}\n{broken\n'
                   '{"id": "1", "title": "Oslo", "text": "Oslo is the capital of Norway."}\n')
    ok = run("kb", "build", str(src), str(tmp_path / "kb"), "--no-dense")
    assert ok.returncode == 0, ok.stderr
    assert "skipped_lines" in ok.stderr and "corpus.jsonl:2: invalid JSON" in ok.stderr
    strict = run("kb", "build", str(src), str(tmp_path / "kb2"), "--no-dense", "--strict")
    assert strict.returncode == 2 and "corpus.jsonl:2" in strict.stderr and "Traceback" not in strict.stderr
    again = run("kb", "build", str(src), str(tmp_path / "kb"), "--no-dense")
    assert again.returncode == 2 and "--force" in again.stderr


def test_serve_refuses_bad_arguments_clearly(tmp_path):
    missing = run("kb", "serve", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "not a knowledge base" in missing.stderr
    bad = run("kb", "serve", str(tmp_path), "--retriever", "magic")
    assert bad.returncode == 2 and "unknown retriever 'magic'" in bad.stderr


def test_serve_and_query_processes(sample_kb):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(sample_kb, port, "bm25")
    try:
        health = wait_healthy(url, proc)
        assert health["retriever"] == "bm25" and health["corpus_size"] > 1000
        out = run("kb", "query", "Who wrote A Modest Proposal?", "--url", url, "--topk", "2", "--json")
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result[0][0]["document"]["title"] == "A Modest Proposal"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_kb_quickstart_serves_and_asks_the_sample_questions(sample_kb, tmp_path):
    import shutil

    kb = tmp_path / "kb"
    shutil.copytree(sample_kb, kb)  # reuse the test run's build: the quickstart only builds when the folder is empty
    out = run("kb", "quickstart", "--dir", str(kb), "--port", str(free_port()), "--retriever", "bm25")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "78 questions: recall@1" in out.stderr and "reusing the knowledge base" in out.stderr
    assert "/access 'Angola' -> https://en.wikipedia.org/wiki/Angola" in out.stderr


def test_quickstart_runs_the_whole_path(sample_kb, tmp_path):
    import shutil

    shutil.copytree(sample_kb, tmp_path / "sample-kb")  # the KB build itself is tested above; reuse it
    out = run("quickstart", "--dir", str(tmp_path), "--port", str(free_port()), "--questions", "3", "--k", "1", timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    rollout = (tmp_path / "rollout" / "trajectories.jsonl").read_text().splitlines()
    assert len(rollout) == 3 * 2 * 2
    report = tmp_path / "eval" / "report.html"
    assert report.is_file() and f"report: {report.resolve()}" in out.stderr.replace("\n", "")
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["items_ok"] == 3


def test_train_without_openrlhf_names_the_extra_in_one_line(tmp_path):
    recipe = "cpu_tiny"  # the packaged recipe, by name
    hide = "import sys; sys.modules.update(dict.fromkeys(['openrlhf', 'vllm', 'deepspeed'])); "  # as if not installed
    out = subprocess.run([sys.executable, "-c", hide + "from asearcher_plugin.cli import main; main()",
                          "train", str(recipe), "--dry-run"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert [line for line in out.stderr.splitlines() if "pip install 'asearcher-plugin[train]'" in line], out.stderr


def test_a_command_reaching_a_train_only_module_says_which_extra(monkeypatch, capsys):
    from asearcher_plugin import cli

    def needs_vllm():
        raise ModuleNotFoundError("No module named 'vllm.engine'", name="vllm.engine")

    monkeypatch.setattr(cli, "app", needs_vllm)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("error: vllm is not installed; it comes with the [train] extra: "
                                       "pip install 'asearcher-plugin[train]'\n")

    def broken_install():
        raise ModuleNotFoundError("No module named 'faiss'", name="faiss")

    monkeypatch.setattr(cli, "app", broken_install)
    with pytest.raises(ModuleNotFoundError):  # a base dependency missing is a broken install: the traceback stays
        cli.main()
