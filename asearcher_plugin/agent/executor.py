"""`AgentExecutor`: the token loop of one trajectory, what OpenRLHF's rollout actor calls (`execute`) and what
evaluation, the demo and the benchmarks drive (`run`). It caps each turn, stops at a closing action tag, feeds the
tool's text back as tokens (or rebuilds the prompt, for the reasoning agent), records each model call for per-call
training, and ends `truncated` when the budget runs out. Neither vLLM nor Ray is imported here.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import replace

try:  # the base classes OpenRLHF checks for; stand-ins when OpenRLHF is not installed (eval, synthesis)
    from openrlhf.utils.agent import AgentExecutorBase
except ImportError:  # pragma: no cover - exercised on installs without the [train] extra
    from asearcher_plugin.agent.bases import AgentExecutorBase

from asearcher_plugin.agent.actions import STOP_STRINGS, scrub
from asearcher_plugin.agent.instance import AgentInstance, StepResult
from asearcher_plugin.agent.prompts import chat_feedback, chat_prompt, reasoning_prompt
from asearcher_plugin.agent.sequences import CallRecords
from asearcher_plugin.agent.transcript import Transcript
from asearcher_plugin.agent.turns import TurnEvent, TurnHook
from asearcher_plugin.engines.types import with_overrides
from asearcher_plugin.records import Trajectory
from asearcher_plugin.settings.config import CONFIG_ENV, RUN_CONFIG_ENV, AgentConfig, ConfigError, load_config
from asearcher_plugin.tools import make_toolbox

NO_STREAMING = (
    "asearcher: the agent runs under OpenRLHF's own generator, WITHOUT the streaming scheduler (it is installed by "
    "`asearcher train RECIPE` or `python -m asearcher_plugin.launch --config run.yaml`)"
)
PER_CALL_NEEDS_SCHEDULER = (
    "agent.training_sequences: per_call hands OpenRLHF several sequences per trajectory, which only the streaming "
    "scheduler (`asearcher train RECIPE`) and its trainer hooks know how to weigh and step; OpenRLHF's own generator "
    "would treat each as a trajectory"
)
NO_CONFIG = (
    f"no agent config reached this rollout actor (${RUN_CONFIG_ENV} and ${CONFIG_ENV} are unset here; OpenRLHF's "
    "own ray.init forwards neither to a cluster): start the run with `asearcher train RECIPE` or `python -m "
    "asearcher_plugin.launch --config run.yaml ...`, or give OpenRLHF an agent file that carries the config: "
    "--train.agent_func_path $(python -m asearcher_plugin.env --config run.yaml)"
)


class AgentExecutor(AgentExecutorBase):
    """Runs one trajectory: generate until a closing action tag, step the environment, repeat."""

    def __init__(
        self,
        config: AgentConfig | None = None,
        for_training: bool = True,
        check_kb: bool | None = None,
        without_launcher: bool = False,
    ):
        """`config` None: built by OpenRLHF's rollout actor with no arguments; the config must reach the actor
        (the launcher's $ASEARCHER_RUN_CONFIG, $ASEARCHER_CONFIG, or a per-run agent file), never defaults.
        `check_kb` (default: when built by OpenRLHF): fail at once if no KB server answers. `without_launcher`:
        a per-run agent file of the plain OpenRLHF command, which says that no streaming scheduler runs."""
        if check_kb is None:
            check_kb = config is None
        if config is None and not (os.environ.get(RUN_CONFIG_ENV) or os.environ.get(CONFIG_ENV)):
            raise ConfigError(NO_CONFIG)
        if without_launcher or (config is None and not os.environ.get(RUN_CONFIG_ENV)):
            print(NO_STREAMING, file=sys.stderr, flush=True)  # the plain OpenRLHF command
        self.config = config or load_config()
        if check_kb and self.config.tools.backend == "local" and self.config.tools.local.check_on_start:
            from asearcher_plugin.tools.preflight import check_kb_reachable

            check_kb_reachable(self.config.tools.local)
        # Per-call sequences (ASearcher's training): a trajectory is one or several token sequences, each what
        # some calls saw and generated, so a context that changes between calls can be trained.
        self.per_call = for_training and self.config.training_sequences == "per_call"
        # Evaluation records its calls too: `asearcher sft-data` trains on exactly the ids each call saw and made.
        self.record_calls = self.per_call or not for_training
        if self.per_call and (without_launcher or (config is None and not os.environ.get(RUN_CONFIG_ENV))):
            raise ConfigError(PER_CALL_NEEDS_SCHEDULER)
        if for_training and not self.per_call and self.config.agent_type == "asearcher-reasoning":
            # Its prompt is rebuilt from the question and the recent history at every call, so the
            # trajectory is not one token sequence.
            raise ConfigError(
                "agent_type 'asearcher-reasoning' rebuilds its prompt each call: train it with "
                "agent.training_sequences: per_call (one training sequence per context)"
            )
        # ASearcher shows a page chunk whole to the one call after it and only its stub to later calls. That
        # changes the context of tokens already generated: one growing training sequence must keep every chunk
        # whole; per-call sequences start a new sequence there.
        self.stub_blocks = (not for_training or self.per_call) and self.config.tools.observation_format == "asearcher"
        self._toolboxes: dict[int, object] = {}  # one per event loop: HTTP clients are loop-bound
        self._judges: dict[int, object] = {}  # likewise, when the reward asks a judge
        self._mcp: dict[int, object] = {}  # MCP sessions (tools.mcp), likewise

    def _toolbox(self):
        loop = asyncio.get_running_loop()
        box = self._toolboxes.get(id(loop))
        if box is None:
            box = self._toolboxes[id(loop)] = make_toolbox(self.config.tools)
        return box

    def _judge(self):
        if self.config.reward.metric != "judge":
            return None
        loop = asyncio.get_running_loop()
        judge = self._judges.get(id(loop))
        if judge is None:
            from asearcher_plugin.rewards.judge import Judge

            judge = self._judges[id(loop)] = Judge(self.config.reward.judge)
        return judge

    async def _mcp_tools(self) -> list:
        """The tools of the MCP servers in tools.mcp, listed once per event loop (their sessions are loop-bound)."""
        if not self.config.tools.mcp:
            return []
        loop = asyncio.get_running_loop()
        servers = self._mcp.get(id(loop))
        if servers is None:
            from asearcher_plugin.tools.mcp_tools import McpTools

            servers = self._mcp[id(loop)] = McpTools(self.config.tools.mcp)
        return await servers.tools()

    async def aclose(self) -> None:
        """Closes the tools' and the judge's HTTP clients and the MCP sessions (a long-lived process that makes an
        executor per request needs it)."""
        held = [*self._toolboxes.values(), *self._judges.values(), *self._mcp.values()]
        self._toolboxes, self._judges, self._mcp = {}, {}, {}
        for thing in held:
            await thing.aclose()

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        """OpenRLHF's entry point: the trajectory as OpenRLHF's dict. Our own callers use `run`."""
        trajectory = await self.run(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images)
        return trajectory.to_openrlhf()

    async def run(
        self,
        prompt,
        label,
        sampling_params,
        max_length: int,
        hf_tokenizer,
        llm_engine,
        images=None,
        on_turn: TurnHook | None = None,
    ) -> Trajectory:
        """`on_turn`, when given, is awaited after every model turn with what the model wrote and what the agent
        made of it (`asearcher demo` streams these); it changes nothing in the trajectory."""
        if not isinstance(prompt, str) or not prompt.strip():  # a null question: never asked as "None", no reward
            out = await self.run(
                "(no question)", [], sampling_params, max_length, hf_tokenizer, llm_engine, on_turn=on_turn
            )
            return replace(out, prompt=prompt, label=label)
        if self.config.agent_type == "tool-calls":
            from asearcher_plugin.agent.tool_loop import run_tool_calls

            return await run_tool_calls(
                self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, on_turn
            )
        if self.config.agent_type == "asearcher-reasoning":
            return await self._run_rebuilding(
                prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, on_turn
            )
        agent = AgentInstance(self.config, self._toolbox(), self._judge())
        transcript = await self._start(agent, prompt, label, sampling_params, max_length, hf_tokenizer)
        cap, eos_id = self.config.max_new_tokens_per_turn, getattr(hf_tokenizer, "eos_token_id", None)
        records = CallRecords(want_logprobs(sampling_params)) if self.record_calls else None
        truncated, done, reward = False, False, 0.0
        call_starts: list[float] = []  # wall clock of each model call, mapped to policy versions by the scheduler
        last_token_at = None
        while not done:
            budget = max_length - len(transcript.tokens)
            if budget <= 0:
                truncated = True
                break
            params = with_overrides(
                sampling_params, max_tokens=min(cap, budget), stop=agent.stop, include_stop_str_in_output=True
            )
            call_starts.append(time.time())
            out = (await llm_engine.generate(transcript.tokens, params)).outputs[0]
            last_token_at = time.time()
            if records is not None:
                records.add(transcript.tokens, out, call_starts[-1], last_token_at)
            transcript.add_turn(out)
            agent.generated_tokens += len(out.token_ids)
            agent.generated_chars += len(out.text)
            if out.finish_reason == "length" and len(transcript.tokens) >= max_length:
                truncated = True
                if on_turn is not None:
                    await on_turn(TurnEvent(agent.turns + 1, out.text, "none", finish_reason=out.finish_reason))
                break
            ended = ended_at_eos(out, eos_id, params.stop)
            stepped = time.time()
            result = await agent.turn(out.text, ended, label)
            done, reward = result.done, result.reward
            if on_turn is not None:
                await on_turn(turn_event(agent, out, result, stepped - call_starts[-1], time.time() - stepped))
            if result.feedback:
                self._add_feedback(transcript, result, hf_tokenizer, max_length)
        if not done:
            reward = await agent.final_reward(label)  # no answer: scores 0, but the metrics are still logged
        return Trajectory(
            prompt=prompt,
            label=label,
            reward=reward,
            scores=agent.metric_scores(),
            stats=agent.counters(),
            truncated=truncated,
            answer=agent.answer,
            text=transcript.text,
            observation_tokens=transcript.tokens,
            action_ranges=transcript.action_ranges,
            rollout_log_probs=transcript.logprobs,
            token_times=[call_starts[0] if call_starts else None, last_token_at],
            turn_times=call_starts,
            **self.recorded(records),
            images=images,
        )

    def recorded(self, records: CallRecords | None) -> dict:
        """Per-call records go to training as `sequences` with per_call; otherwise (evaluation) to `calls`, which
        only `asearcher sft-data` reads."""
        if records is None:
            return {}
        return {"sequences" if self.per_call else "calls": records.to_openrlhf()}

    async def _start(self, agent, prompt, label, sampling_params, max_length: int, hf_tokenizer) -> Transcript:
        """The prompt's tokens, cut from the left so at least one turn fits."""
        observation = (await agent.reset({"observation": prompt, "label": label}))["observation"]
        if self.config.feedback_style == "chat" and self.config.wrap_prompt:
            observation = chat_prompt(hf_tokenizer, observation)
        tokens = hf_tokenizer(text=observation, add_special_tokens=False)["input_ids"]
        cap = self.config.max_new_tokens_per_turn
        tokens = tokens[-max(1, max_length - min(cap, max_length // 2)) :]
        return Transcript.start(observation, tokens, want_logprobs(sampling_params))

    def _add_feedback(self, transcript: Transcript, result: StepResult, hf_tokenizer, max_length: int) -> None:
        def wrap(text: str) -> str:
            return chat_feedback(hf_tokenizer, text.strip()) if self.config.feedback_style == "chat" else text

        feedback = wrap(result.feedback)
        ids = hf_tokenizer(text=feedback, add_special_tokens=False)["input_ids"][: max_length - len(transcript.tokens)]
        if self.stub_blocks and result.short != result.feedback:
            short = wrap(result.short)
            short_ids = hf_tokenizer(text=short, add_special_tokens=False)["input_ids"][: len(ids)]
            transcript.add_feedback(ids, feedback, short_ids, short)
        else:
            transcript.add_feedback(ids, feedback)

    async def _run_rebuilding(
        self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, on_turn=None
    ):
        """The reasoning agent: each call sees the question and the recent history, rebuilt as a fresh prompt."""
        agent = AgentInstance(self.config, self._toolbox(), self._judge())
        agent.question = prompt = scrub(prompt)
        history, done, calls, tokens_used = "", False, 0, 0
        records = CallRecords(want_logprobs(sampling_params)) if self.record_calls else None
        fresh = fresh_short = ""  # the last tool output: whole for the next call only, then its short form
        while not done:
            text = reasoning_prompt(prompt, history + fresh, agent.template)
            if getattr(hf_tokenizer, "chat_template", None):
                text = chat_prompt(hf_tokenizer, text)
            ids = hf_tokenizer(text=text, add_special_tokens=False)["input_ids"][-(max_length - 1) :]
            budget = min(self.config.max_new_tokens_per_turn, max_length - len(ids))
            params = with_overrides(
                sampling_params, max_tokens=max(1, budget), stop=agent.stop, include_stop_str_in_output=True
            )
            started = time.time()
            out = (await llm_engine.generate(ids, params)).outputs[0]
            if records is not None:
                records.add(ids, out, started, time.time())
            calls += 1
            tokens_used += len(ids) + len(out.token_ids)
            agent.generated_tokens += len(out.token_ids)
            agent.generated_chars += len(out.text)
            stepped = time.time()
            result = await agent.turn(out.text, label=label)
            done = result.done
            if on_turn is not None:
                await on_turn(turn_event(agent, out, result, stepped - started, time.time() - stepped))
            history += fresh_short + out.text
            fresh, fresh_short = result.feedback, result.short
        stats = {**agent.counters(), "llm_calls": float(calls), "tokens_processed": float(tokens_used)}
        return Trajectory(
            prompt=prompt,
            label=label,
            reward=result.reward,
            scores=agent.metric_scores(),
            stats=stats,
            answer=agent.answer,
            text=history,
            **self.recorded(records),
        )


def turn_event(
    agent: AgentInstance, out, result: StepResult, generate_seconds: float, step_seconds: float
) -> TurnEvent:
    action = agent.last_action
    return TurnEvent(
        turn=agent.turns,
        text=out.text,
        action=action.kind if action else "none",
        argument=action.argument if action else "",
        error=action.error if action else "",
        feedback=result.feedback,
        done=result.done,
        finish_reason=out.finish_reason,
        generate_seconds=round(generate_seconds, 4),
        step_seconds=round(step_seconds, 4),
    )


def want_logprobs(sampling_params) -> bool:
    return getattr(sampling_params, "logprobs", None) is not None


def ended_at_eos(out, eos_id: int | None, stops=STOP_STRINGS) -> bool:
    """Whether the model ended its turn itself (EOS) rather than at an action's closing tag or out of tokens.

    vLLM reports EOS as finish_reason "stop" with stop_reason None (or the token id, for other stop
    tokens) and keeps the EOS token in token_ids; a stop string is reported as a str. Servers that
    do not report stop_reason are recognised by the closing tag the text ends with.
    """
    ids = out.token_ids
    if eos_id is not None and len(ids) and ids[-1] == eos_id:
        return True
    if out.finish_reason != "stop" or isinstance(out.stop_reason, str):
        return False
    return not (out.text or "").rstrip().endswith(tuple(stops or STOP_STRINGS))
