"""The CPU harness's small parts: the missing-extra message, the inert vLLM plugin, the CPU view of torch."""

import os
import subprocess
import sys

import pytest


def test_cpu_without_vllm_fails_with_one_line_naming_the_extra(tmp_path):
    blocked = tmp_path / "blocked" / "vllm"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('vllm is not installed')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.cli", "train", "cpu_tiny", "--cpu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--cpu needs vllm" in lines[0] and "cpu-harness" in lines[0], proc.stderr


def test_vllm_plugin_is_inert_unless_the_harness_runs(monkeypatch):
    pytest.importorskip("openrlhf")
    from openrlhf.trainer.ray import vllm_worker_wrap
    from openrlhf.utils import distributed_util

    from asearcher_plugin.openrlhf.cpu import vllm_transport

    before = (vllm_worker_wrap.WorkerWrap.update_weight, distributed_util.stateless_init_process_group)
    monkeypatch.delenv(vllm_transport.HARNESS_ENV, raising=False)
    vllm_transport.register()
    assert (vllm_worker_wrap.WorkerWrap.update_weight, distributed_util.stateless_init_process_group) == before
    monkeypatch.setattr(vllm_worker_wrap.WorkerWrap, "update_weight", before[0])
    monkeypatch.setattr(distributed_util, "stateless_init_process_group", before[1])
    monkeypatch.setenv(vllm_transport.HARNESS_ENV, "1")
    vllm_transport.register()
    assert vllm_worker_wrap.WorkerWrap.update_weight is vllm_transport.update_weight
    assert distributed_util.stateless_init_process_group is vllm_transport.stateless_init_process_group


def test_the_cpu_view_of_torch_changes_only_cuda():
    import torch

    from asearcher_plugin.openrlhf.cpu.device_shims import CpuTorch

    view = CpuTorch()
    assert view.device(f"cuda:{view.cuda.current_device()}") == torch.device("cpu")
    assert view.device("cpu") == torch.device("cpu") and view.device("meta").type == "meta"
    assert view.cuda.current_stream() is None and view.cuda.synchronize() is None
    assert view.Tensor is torch.Tensor and view.distributed is torch.distributed
    assert torch.cuda.is_available() is False and view.cuda is not torch.cuda  # torch itself is untouched


def test_the_scripted_workload_decodes_on_the_real_engine_and_keeps_its_script(tokenizer):
    import asyncio

    from asearcher_plugin.engines.types import SamplingParams
    from asearcher_plugin.openrlhf.cpu.workload import ScriptedEngine, Workload

    class Engine:  # records what the engine was asked to decode
        def __init__(self):
            self.calls = []

        async def generate(self, prompt_token_ids, params):
            self.calls.append((len(prompt_token_ids), params.max_tokens, params.min_tokens, params.stop))

    engine = Engine()
    scripted = ScriptedEngine(engine, Workload(max_turns=3, turns_scale=100.0, tokens_per_turn=7), tokenizer)
    prompt = tokenizer("User: Who wrote Hamlet?\n\nAssistant: ")["input_ids"]
    params = SamplingParams(max_tokens=64, logprobs=0, stop=["</search>"])
    first = asyncio.run(scripted.generate(prompt, params)).outputs[0]
    assert first.text == "<think>plan 3</think><search>Who wrote Hamlet?</search>"
    later = tokenizer(tokenizer.decode(prompt) + first.text + " results </search>")["input_ids"]
    last = asyncio.run(scripted.generate(later, params)).outputs[0]
    assert last.text == "<answer>unknown</answer>"  # plan 3, two searches made: the third turn answers
    assert engine.calls == [(len(prompt), 7, 7, None), (len(later), 7, 7, None)]
    assert first.logprobs is not None and len(first.logprobs) == len(first.token_ids)


def test_the_scripted_agent_file_loads_as_openrlhf_loads_it(monkeypatch):
    """OpenRLHF's `_load_agent_executor`: spec_from_file_location('agent_module', path), exec_module, no entry in
    sys.modules (a dataclass with string annotations in the file would fail there, and the engines would die)."""
    import importlib.util
    import json

    from asearcher_plugin.openrlhf.cpu import scripted
    from asearcher_plugin.openrlhf.cpu.switches import switches

    run = {"agent": {"tools": {"local": {"check_on_start": False}}}, "cpu_harness": {"workload": {"max_turns": 3}}}
    monkeypatch.setenv("ASEARCHER_RUN_CONFIG", json.dumps(run))
    switches.cache_clear()
    spec = importlib.util.spec_from_file_location("agent_module", scripted.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.AgentExecutor().workload.max_turns == 3
