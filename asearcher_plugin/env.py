"""The agent file OpenRLHF loads with `--train.agent_func_path`.

OpenRLHF's rollout actor imports this file by path and builds `AgentExecutor()` with no
arguments; the configuration comes from the launcher ($ASEARCHER_RUN_CONFIG in Ray's runtime env), the
YAML file named by $ASEARCHER_CONFIG, or a per-run agent file (`python -m asearcher_plugin.env --config
run.yaml`, see agent_file.py); with none of them it refuses to start rather than run on defaults. One
`AgentInstance` per trajectory holds its state; the executor owns the token loop so it can cap
each turn, stop at a closing action tag, and end with `truncated` when the budget runs out.
Neither vLLM nor Ray is imported here.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

try:  # the base classes OpenRLHF checks for; stand-ins when OpenRLHF is not installed (eval, synthesis)
    from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase
except ImportError:  # pragma: no cover - exercised on installs without the [train] extra
    from asearcher_plugin.agent.bases import AgentExecutorBase, AgentInstanceBase

from asearcher_plugin import reward_function
from asearcher_plugin.agent import observations as asearcher_format
from asearcher_plugin.agent.actions import STOP_STRINGS, parse_action, scrub
from asearcher_plugin.agent.prompts import (
    ALLOWED_ACTIONS,
    build_prompt,
    chat_feedback,
    chat_prompt,
    format_docs,
    information,
    invalid_feedback,
    reasoning_prompt,
    template_for,
)
from asearcher_plugin.agent.sequences import CallRecords
from asearcher_plugin.agent.transcript import Transcript
from asearcher_plugin.agent.turns import TurnEvent, TurnHook
from asearcher_plugin.agent_file import NO_STREAMING, PER_CALL_NEEDS_SCHEDULER
from asearcher_plugin.config import CONFIG_ENV, RUN_CONFIG_ENV, AgentConfig, ConfigError, load_config
from asearcher_plugin.engines.types import with_overrides
from asearcher_plugin.records import Trajectory, flat_logs
from asearcher_plugin.reward import METRICS, format_factor, invalid_answer_penalty, parse_aug, parse_gold, score_all
from asearcher_plugin.tools import ToolError, ToolUnavailable, make_toolbox
from local_retriever.log_throttle import throttled

NO_CONFIG = (
    f"no agent config reached this rollout actor (${RUN_CONFIG_ENV} and ${CONFIG_ENV} are unset here; OpenRLHF's "
    "own ray.init forwards neither to a cluster): start the run with `asearcher train RECIPE` or `python -m "
    "asearcher_plugin.launch --config run.yaml ...`, or give OpenRLHF an agent file that carries the config: "
    "--train.agent_func_path $(python -m asearcher_plugin.env --config run.yaml)"
)

log = throttled(__name__)  # one WARNING per tool and error type a minute, however many trajectories fail alike


# Blocks waiting to be shown (ASearcher's queue holds 128): a model that opens pages in its summary turns
# cannot pile up page text without bound.
MAX_PENDING_BLOCKS = 128


def _throttle_key(kind: str, exc: BaseException) -> dict:
    return {"throttle_key": (kind, type(exc).__name__)}


def _tensor(value: float):
    import torch

    return torch.tensor(float(value))


class AgentInstance(AgentInstanceBase):
    """One trajectory: prompt, tool calls, counters and the final score."""

    def __init__(self, config: AgentConfig | None = None, toolbox=None):
        self.config = config or load_config()
        self.toolbox = toolbox
        self.allowed = ALLOWED_ACTIONS[self.config.agent_type]
        self.turns = self.searches = self.accesses = self.invalid = self.tool_errors = 0
        self.tool_errors_infra = 0  # the part of tool_errors the infrastructure caused (ToolUnavailable, transport)
        self.generated_tokens = 0  # the model's tokens over all calls, counted by the executor
        self.generated_chars = 0  # and the characters of their text
        self.tool_seconds = 0.0
        self.answer: str | None = None
        self.ended_without_action = False
        self.page_cursor: dict[str, int] = {}
        self.template = template_for(self.config.agent_type, self.config.prompt_template)
        # observation_format asearcher: tool output waits here as blocks, shown one per call, each followed by a
        # summary turn that ends at </think> (ASearcher's summary jobs).
        self.asearcher_format = self.config.tools.observation_format == "asearcher"
        self.blocks: deque[asearcher_format.Block] = deque()
        self.summarising = False
        # Every metric's key from the start, whatever happens later: OpenRLHF batches the extra_logs
        # of a batch's samples key by key and fails when one sample lacks a key the others have.
        self.scores: dict[str, float] = dict.fromkeys(METRICS, 0.0)
        self.judge_failed = False
        self.question = ""
        self.last_action = None  # the action parsed from the latest turn, for a turn hook

    async def reset(self, states: dict, **kwargs) -> dict:
        question = self.question = scrub(states["observation"])
        observation = (
            build_prompt(self.config.agent_type, question, self.template) if self.config.wrap_prompt else question
        )
        return {"observation": observation, "label": states.get("label")}

    @property
    def stop(self) -> list[str]:
        """Where the next turn ends: at the summary's </think> right after a block, else at an action's closing tag."""
        return list(asearcher_format.SUMMARY_STOP if self.summarising else STOP_STRINGS)

    async def step(self, states: dict, **kwargs) -> dict:
        """One turn. `states["ended"]` says the model's turn ended with EOS: without an action it ends the trajectory.

        The result's `environment_feedback` is what the next call sees; `feedback_short` is what later
        calls see in its place (the same text, except for ASearcher-format page chunks).
        """
        if self.asearcher_format:
            return await self._step_asearcher(states)
        self.turns += 1
        action = self.last_action = parse_action(states.get("action_text") or "", self.allowed)
        feedback, done = "", False
        if action.kind == "invalid":
            self.invalid += 1
            feedback = invalid_feedback(action.error)
            if states.get("ended"):
                self.ended_without_action = done = True
        elif action.kind == "answer":
            self.answer, done = action.argument, True
        else:
            feedback = await self._run_tool(action.kind, action.argument)
        if not done and self.turns >= self.config.max_turns:
            done = True
        return await self._result(states, feedback, feedback, done)

    async def _result(self, states: dict, feedback: str, short: str, done: bool) -> dict:
        reward = await self.final_reward(states.get("label")) if done else 0.0
        return {
            "rewards": _tensor(reward),
            "scores": _tensor(reward),
            "environment_feedback": "" if done else scrub(feedback),
            "feedback_short": "" if done else scrub(short),
            "done": done,
            "extra_logs": self.extra_logs(),
        }

    async def _step_asearcher(self, states: dict) -> dict:
        """ASearcher's loop: a turn without an action gets no text back (the next call continues the transcript),
        and a summary turn without one is what a summary turn should be."""
        summary_turn, self.summarising = self.summarising, False
        self.turns += 1
        action = self.last_action = parse_action(states.get("action_text") or "", self.allowed)
        done = False
        if action.kind == "invalid":
            if not summary_turn:
                self.invalid += 1
            if states.get("ended"):
                self.ended_without_action = done = True
        elif action.kind == "answer":
            self.answer, done = action.argument, True
        else:
            for block in await self._run_tool_asearcher(action.kind, action.argument):
                if len(self.blocks) < MAX_PENDING_BLOCKS:
                    self.blocks.append(block)
        if not done and self.turns >= self.config.max_turns:
            done = True
        feedback = short = ""
        if not done and self.blocks:
            block = self.blocks.popleft()
            feedback, short = asearcher_format.injected(block.text), asearcher_format.injected(block.short)
            self.summarising = True
        return await self._result(states, feedback, short, done)

    async def _run_tool_asearcher(self, kind: str, argument: str) -> list:
        started = time.perf_counter()
        try:
            if kind == "search":
                self.searches += 1
                return [
                    asearcher_format.search_block(
                        await self.toolbox.search(argument, self.config.tools.topk), self.config.tools.topk
                    )
                ]
            self.accesses += 1
            return asearcher_format.page_blocks(await self.toolbox.access(argument))
        except (ToolError, asyncio.TimeoutError, OSError) as exc:
            self.tool_errors += 1
            self.tool_errors_infra += not isinstance(exc, ToolError) or isinstance(exc, ToolUnavailable)
            log.warning("%s failed: %s: %.300s", kind, type(exc).__name__, exc, extra=_throttle_key(kind, exc))
            return [asearcher_format.failure_block(f"{kind} failed: {exc or type(exc).__name__}")]
        except Exception as exc:  # noqa: BLE001 - whatever the model wrote, the rollout must go on
            self.tool_errors += 1
            log.warning(
                "%s of %.200r raised %s: %s", kind, argument, type(exc).__name__, exc, extra=_throttle_key(kind, exc)
            )
            return [asearcher_format.failure_block(f"{kind} failed: {type(exc).__name__}")]
        finally:
            self.tool_seconds += time.perf_counter() - started

    async def _run_tool(self, kind: str, argument: str) -> str:
        started = time.perf_counter()
        try:
            if kind == "search":
                self.searches += 1
                docs = await self.toolbox.search(argument, self.config.tools.topk)
                return information(format_docs(docs, self.config.tools.max_doc_chars))
            self.accesses += 1
            return information(await self._read_page(argument))
        except (ToolError, asyncio.TimeoutError, OSError) as exc:
            self.tool_errors += 1
            self.tool_errors_infra += not isinstance(exc, ToolError) or isinstance(exc, ToolUnavailable)
            log.warning("%s failed: %s: %.300s", kind, type(exc).__name__, exc, extra=_throttle_key(kind, exc))
            return information(f"{kind} failed: {exc or type(exc).__name__}")
        except Exception as exc:  # noqa: BLE001 - whatever the model wrote, the rollout must go on
            self.tool_errors += 1
            log.warning(
                "%s of %.200r raised %s: %s", kind, argument, type(exc).__name__, exc, extra=_throttle_key(kind, exc)
            )
            return information(f"{kind} failed: {type(exc).__name__}")
        finally:
            self.tool_seconds += time.perf_counter() - started

    async def _read_page(self, url: str) -> str:
        page = await self.toolbox.access(url)
        if not page:
            return "No More Information is Found for this URL."
        size, limit = self.config.tools.page_chunk_chars, self.config.tools.max_page_chunks
        chunks = [page[i : i + size] for i in range(0, min(len(page), size * limit), size)]
        k = self.page_cursor.get(url, 0)
        if k >= len(chunks):
            return f"The whole page has been read ({len(chunks)} parts)."
        self.page_cursor[url] = k + 1
        more = f" Access it again to read part {k + 2}." if k + 1 < len(chunks) else ""
        return f">>>> Page {k + 1} of {len(chunks)} >>>>{more}\n{chunks[k]}"

    async def final_reward(self, label) -> float:
        golds = [scrub(g) for g in parse_gold(label)]
        self.scores = score_all(self.answer, golds, self.config.reward, [scrub(g) for g in parse_aug(label)])
        metric = self.config.reward.metric
        score = self.scores.get(metric, self.scores["f1"])
        if metric == "judge":
            # score_judge is what the reward used: the verdict, or F1 when the judge failed (judge_failed = 1).
            self.scores["judge"] = score
            if self.answer is not None:
                self.scores["judge"] = score = await self._judge(golds, score)
        if self.config.reward.function:  # the user's reward; the scores above are still logged
            return reward_function.call(
                self.config.reward.function, self.question, self.answer, label, self.counters()
            )
        if self.config.reward.format_factor:
            score *= format_factor(self.invalid, self.answer is not None)
        return invalid_answer_penalty(score, self.answer, self.config.reward)

    async def _judge(self, golds: list[str], fallback: float) -> float:
        from asearcher_plugin.judge import JudgeUnavailable, judge

        try:
            return float(await judge(self.question, self.answer, golds, self.config.reward.judge))
        except JudgeUnavailable:
            pass
        except Exception as exc:  # noqa: BLE001 - a judge bug must not end the rollout
            log.warning("judge raised %s: %s", type(exc).__name__, exc)
        self.judge_failed = True
        return fallback

    def metric_scores(self) -> dict[str, float]:
        """One value per metric, the same keys for every trajectory under one config (see `scores` in __init__)."""
        scores = {k: float(self.scores.get(k, 0.0)) for k in METRICS}
        if self.config.reward.metric == "judge":
            scores["judge"] = float(self.scores.get("judge", 0.0))
        return scores

    def counters(self) -> dict[str, float]:
        stats = {
            "turns": float(self.turns),
            "searches": float(self.searches),
            "accesses": float(self.accesses),
            "invalid_actions": float(self.invalid),
            "tool_errors": float(self.tool_errors),
            "tool_errors_infra": float(self.tool_errors_infra),
            "tool_seconds": round(self.tool_seconds, 4),
            "generated_tokens": float(self.generated_tokens),
            "generated_chars": float(self.generated_chars),
            "answered": float(self.answer is not None),
            "answer_chars": float(len(self.answer or "")),
            "ended_without_action": float(self.ended_without_action),
        }
        if self.config.reward.metric == "judge":
            stats["judge_failed"] = float(self.judge_failed)
        return stats

    def extra_logs(self) -> dict:
        return flat_logs(self.counters(), self.metric_scores())


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

    def _toolbox(self):
        loop = asyncio.get_running_loop()
        box = self._toolboxes.get(id(loop))
        if box is None:
            box = self._toolboxes[id(loop)] = make_toolbox(self.config)
        return box

    async def aclose(self) -> None:
        """Closes the tools' HTTP clients (a long-lived process that makes an executor per request needs it)."""
        boxes, self._toolboxes = list(self._toolboxes.values()), {}
        for box in boxes:
            await box.aclose()

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
        if self.config.agent_type == "asearcher-reasoning":
            return await self._run_rebuilding(
                prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, on_turn
            )
        agent = AgentInstance(self.config, self._toolbox())
        transcript = await self._start(agent, prompt, label, sampling_params, max_length, hf_tokenizer)
        cap, eos_id = self.config.max_new_tokens_per_turn, getattr(hf_tokenizer, "eos_token_id", None)
        records = CallRecords(want_logprobs(sampling_params)) if self.per_call else None
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
            step = {"action_text": out.text, "label": label, "sampling_params": params, "ended": ended}
            stepped = time.time()
            result = await agent.step(step)
            done, reward = result["done"], float(result["rewards"].item())
            if on_turn is not None:
                await on_turn(turn_event(agent, out, result, stepped - call_starts[-1], time.time() - stepped))
            if result["environment_feedback"] and not done:
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
            sequences=records.to_openrlhf() if records is not None else None,
            images=images,
        )

    async def _start(self, agent, prompt, label, sampling_params, max_length: int, hf_tokenizer) -> Transcript:
        """The prompt's tokens, cut from the left so at least one turn fits."""
        observation = (await agent.reset({"observation": prompt, "label": label}))["observation"]
        if self.config.feedback_style == "chat" and self.config.wrap_prompt:
            observation = chat_prompt(hf_tokenizer, observation)
        tokens = hf_tokenizer(text=observation, add_special_tokens=False)["input_ids"]
        cap = self.config.max_new_tokens_per_turn
        tokens = tokens[-max(1, max_length - min(cap, max_length // 2)) :]
        return Transcript.start(observation, tokens, want_logprobs(sampling_params))

    def _add_feedback(self, transcript: Transcript, result: dict, hf_tokenizer, max_length: int) -> None:
        feedback = result["environment_feedback"]
        if self.config.feedback_style == "chat":
            feedback = chat_feedback(hf_tokenizer, feedback.strip())
        ids = hf_tokenizer(text=feedback, add_special_tokens=False)["input_ids"][: max_length - len(transcript.tokens)]
        short = result.get("feedback_short", feedback)
        if self.stub_blocks and short != feedback:
            short_ids = hf_tokenizer(text=short, add_special_tokens=False)["input_ids"][: len(ids)]
            transcript.add_feedback(ids, feedback, short_ids, short)
        else:
            transcript.add_feedback(ids, feedback)

    async def _run_rebuilding(
        self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, on_turn=None
    ):
        """The reasoning agent: each call sees the question and the recent history, rebuilt as a fresh prompt."""
        agent = AgentInstance(self.config, self._toolbox())
        agent.question = prompt = scrub(prompt)
        history, done, calls, tokens_used = "", False, 0, 0
        records = CallRecords(want_logprobs(sampling_params)) if self.per_call else None
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
            result = await agent.step({"action_text": out.text, "label": label})
            done = result["done"]
            if on_turn is not None:
                await on_turn(turn_event(agent, out, result, stepped - started, time.time() - stepped))
            history += fresh_short + out.text
            fresh = result["environment_feedback"] or ""
            fresh_short = result.get("feedback_short", fresh) or ""
        stats = {**agent.counters(), "llm_calls": float(calls), "tokens_processed": float(tokens_used)}
        return Trajectory(
            prompt=prompt,
            label=label,
            reward=float(result["rewards"].item()),
            scores=agent.metric_scores(),
            stats=stats,
            answer=agent.answer,
            text=history,
            sequences=records.to_openrlhf() if records is not None else None,
        )


def turn_event(agent: AgentInstance, out, result: dict, generate_seconds: float, step_seconds: float) -> TurnEvent:
    action = agent.last_action
    return TurnEvent(
        turn=agent.turns,
        text=out.text,
        action=action.kind if action else "none",
        argument=action.argument if action else "",
        error=action.error if action else "",
        feedback=result["environment_feedback"],
        done=bool(result["done"]),
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


def agent_file() -> Path:
    return Path(__file__).resolve()


def main(argv: list[str]) -> None:
    """No arguments: this file (the config must then reach the actors another way). `--config run.yaml [--out
    FILE]`: a per-run agent file carrying the config, for the plain OpenRLHF command."""
    if not argv:
        print(agent_file())
        return
    if argv[0] != "--config" or len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--out"):
        raise SystemExit("usage: python -m asearcher_plugin.env [--config run.yaml [--out agent.py]]")
    from asearcher_plugin.agent_file import write
    from asearcher_plugin.recipe import RecipeError

    try:
        path = write(argv[1], argv[3] if len(argv) == 4 else None)
    except (RecipeError, ConfigError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(NO_STREAMING, file=sys.stderr)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
