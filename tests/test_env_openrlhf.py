"""The agent file as OpenRLHF 0.11.2 loads and uses it: real openrlhf, real tiny model, real KB server."""

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asearcher_plugin.engines.hf import HFEngine
from asearcher_plugin.engines.types import SamplingParams
from tests.helpers import samples_generator_module


def load_like_openrlhf(path: str):
    """What `openrlhf.trainer.ray.vllm_engine._load_agent_executor` does with --train.agent_func_path."""
    from openrlhf.utils.agent import AgentExecutorBase

    assert path.endswith(".py")
    spec = importlib.util.spec_from_file_location("agent_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    return module.AgentExecutor()


@pytest.fixture()
def agent_config(tmp_path, kb_server, monkeypatch):
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(
        f"agent:\n  agent_type: asearcher\n  max_turns: 4\n  max_new_tokens_per_turn: 24\n"
        f"  tools:\n    local:\n      urls: ['{kb_server}']\n"
    )
    monkeypatch.setenv("ASEARCHER_CONFIG", str(cfg))
    return cfg


def test_module_prints_its_path_and_imports_no_vllm_or_ray():
    out = subprocess.run([sys.executable, "-m", "asearcher_plugin.env"], capture_output=True, text=True, check=True)
    path = Path(out.stdout.strip())
    assert path.is_file() and path.name == "env.py"
    probe = (
        "import sys, importlib.util; s = importlib.util.spec_from_file_location('agent_module', sys.argv[1]); "
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.AgentExecutor(); "
        "print(sorted(x for x in ('vllm', 'ray') if x in sys.modules))"
    )
    no_kb_check = {**os.environ, "ASEARCHER_RUN_CONFIG": '{"agent": {"tools": {"local": {"check_on_start": false}}}}'}
    loaded = subprocess.run(
        [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True, env=no_kb_check
    )
    assert loaded.stdout.strip() == "[]"


def test_bad_config_fails_at_load_naming_the_field(tmp_path, monkeypatch):
    from asearcher_plugin.settings.config import ConfigError, load_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("agent:\n  agent_type: magic\n  max_turns: 0\n  tools: {topk: 3, bogus: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    for field in ("agent_type", "max_turns", "tools.bogus"):
        assert field in str(err.value)
    monkeypatch.setenv("ASEARCHER_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="missing.yaml: file not found"):
        load_like_openrlhf(str(Path(__import__("asearcher_plugin.env").env.__file__)))


def test_execute_with_tiny_model_becomes_an_experience(agent_config, tiny_model):
    import asearcher_plugin.env as env

    executor = load_like_openrlhf(env.__file__)
    engine = HFEngine(str(tiny_model), seed=1)
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=None, logprobs=1, skip_special_tokens=False)

    async def run():
        return await asyncio.gather(
            *(
                executor.execute("Who wrote Animal Farm?", '["George Orwell"]', params, 400, engine.tokenizer, engine)
                for _ in range(2)
            )
        )

    responses = asyncio.run(run())
    sg = samples_generator_module()
    for response in responses:
        assert response["reward"] is not None and 1 <= response["extra_logs"]["turns"] <= 4
        tokens, ranges, logprobs = (
            response["observation_tokens"],
            response["action_ranges"],
            response["rollout_log_probs"],
        )
        assert len(tokens) <= 400 and len(logprobs) == len(tokens)
        assert all(0 < e - s <= 24 for s, e in ranges)  # the per-turn cap holds
        experience = sg.SamplesGenerator._process_response_into_experience(None, response, max_len=400)
        generated = sum(e - s for s, e in ranges)
        assert experience.sequences.shape[1] == len(tokens)
        assert experience.action_mask.shape[1] == experience.rollout_log_probs.shape[1] == len(tokens) - 1
        assert int(experience.action_mask.sum()) == generated - (1 if ranges[0][0] == 0 else 0)
        # Log-probs are real for generated tokens and zero for prompt and tool tokens.
        mask = experience.action_mask[0].bool()
        assert torch.all(experience.rollout_log_probs[0][~mask] == 0)
        assert torch.all(experience.rollout_log_probs[0][mask] <= 0) and torch.any(
            experience.rollout_log_probs[0][mask] < 0
        )
        assert experience.info["turns"].item() == response["extra_logs"]["turns"]


def test_tools_through_the_agent_instance(agent_config, kb_server):
    """Scripted actions through the real tools: search, paged access, a tool failure, an answer."""
    from asearcher_plugin.env import AgentInstance
    from asearcher_plugin.settings.config import load_config
    from asearcher_plugin.tools import make_toolbox

    async def run():
        config = load_config()
        box = make_toolbox(config.tools)
        agent = AgentInstance(config, box)
        label = '["George Orwell", "Orwell"]'
        s = await agent.step({"action_text": "<search> author of Animal Farm </search>", "label": label})
        assert (
            "<information>" in s["environment_feedback"]
            and "Animal Farm" in s["environment_feedback"]
            and not s["done"]
        )
        s = await agent.step(
            {"action_text": "<access>https://en.wikipedia.org/wiki/Albert_Einstein</access>", "label": label}
        )
        assert "Page 1 of" in s["environment_feedback"]
        s = await agent.step(
            {"action_text": "<access>https://en.wikipedia.org/wiki/Albert_Einstein</access>", "label": label}
        )
        assert "Page 2 of" in s["environment_feedback"]
        s = await agent.step({"action_text": "<answer>George Orwell</answer>", "label": label})
        assert s["done"] and s["rewards"].item() == 1.0 and s["extra_logs"]["searches"] == 1.0
        await box.aclose()

        # A dead server: the failure becomes feedback and a counter, the trajectory goes on.
        config.tools.local.urls = ["http://127.0.0.1:9"]
        config.tools.local.retries = 0
        dead = AgentInstance(config, make_toolbox(config.tools))
        s = await dead.step({"action_text": "<search>x</search>", "label": label})
        assert "search failed" in s["environment_feedback"] and s["extra_logs"]["tool_errors"] == 1.0 and not s["done"]

    asyncio.run(run())


def test_step_never_raises_on_adversarial_output():
    """Any model output through step(): no exception, an invalid action counted, the trajectory goes on."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from asearcher_plugin.env import AgentInstance
    from asearcher_plugin.settings.config import AgentConfig
    from asearcher_plugin.tools import make_toolbox

    config = AgentConfig(agent_type="asearcher", max_turns=1000)
    config.tools.local.urls = ["http://127.0.0.1:9"]  # nothing listens: every tool call fails fast
    config.tools.local.retries = 0

    texts = st.one_of(
        st.text(max_size=200),
        st.builds(
            lambda t, q: f"<{t}>{q}", st.sampled_from(["search", "access", "answer", "think"]), st.text(max_size=50)
        ),
        st.builds(lambda q, n: f"<search>{q * n}</search>", st.text(min_size=1, max_size=20), st.integers(500, 1000)),
        st.just("<search>a</search><access>b</access>"),
        st.just("<answer></answer>"),
        st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
    )

    @settings(max_examples=150, deadline=None)
    @given(texts)
    def check(text):
        async def run():
            box = make_toolbox(config.tools)
            agent = AgentInstance(config, box)
            result = await agent.step({"action_text": text, "label": "x"})
            await box.aclose()
            return agent, result

        agent, result = asyncio.run(run())
        assert isinstance(result["environment_feedback"], str) and isinstance(result["done"], bool)
        assert float(result["rewards"].item()) in (0.0, 1.0)
        logs = result["extra_logs"]
        assert logs["invalid_actions"] + logs["searches"] + logs["accesses"] + logs["answered"] == 1

    check()


def test_reasoning_agent_is_refused_for_single_sequence_training_and_runs_for_eval(tiny_model, kb_server):
    from asearcher_plugin.env import AgentExecutor
    from asearcher_plugin.settings.config import AgentConfig, ConfigError

    config = AgentConfig(agent_type="asearcher-reasoning", max_turns=3, max_new_tokens_per_turn=16)
    config.tools.local.urls = [kb_server]
    with pytest.raises(ConfigError, match="train it with agent.training_sequences: per_call"):
        AgentExecutor(config)
    engine = HFEngine(str(tiny_model), seed=2)
    result = asyncio.run(
        AgentExecutor(config, for_training=False).execute(
            "Who wrote Animal Farm?", "George Orwell", SamplingParams(temperature=1.0), 2048, engine.tokenizer, engine
        )
    )
    assert result["extra_logs"]["llm_calls"] == 3 and result["observation_tokens"] is None


def test_chat_feedback_style_uses_the_chat_template(tiny_model, kb_server):
    from asearcher_plugin.env import AgentExecutor
    from asearcher_plugin.settings.config import AgentConfig

    config = AgentConfig(agent_type="search-r1", max_turns=2, max_new_tokens_per_turn=12, feedback_style="chat")
    config.tools.local.urls = [kb_server]
    engine = HFEngine(str(tiny_model), seed=4)
    result = asyncio.run(
        AgentExecutor(config).execute(
            "Who wrote Animal Farm?", "George Orwell", SamplingParams(temperature=1.0), 1024, engine.tokenizer, engine
        )
    )
    text = result["text"]
    assert (
        text.startswith("<|im_start|>user\n")
        and text.count("<|im_start|>assistant\n") == result["extra_logs"]["turns"]
    )
    # Tool or correction turns are user turns of the template, and their tokens are outside every action range.
    assert "<|im_end|>\n<|im_start|>user\n" in text
    tokens, ranges = result["observation_tokens"], result["action_ranges"]
    user_id = engine.tokenizer.convert_tokens_to_ids("<|im_start|>")
    in_action = {i for s, e in ranges for i in range(s, e)}
    assert all(i not in in_action for i, t in enumerate(tokens) if t == user_id)
