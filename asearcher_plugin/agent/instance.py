"""One trajectory's state: `AgentInstance` parses each model turn, runs its tool call, keeps the counters and scores
the answer. `turn` returns a typed `StepResult`, which the executor (executor.py) reads; `step` is OpenRLHF's
`AgentInstanceBase` contract (its dict of tensors) around it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

try:  # the base classes OpenRLHF checks for; stand-ins when OpenRLHF is not installed (eval, synthesis)
    from openrlhf.utils.agent import AgentInstanceBase
except ImportError:  # pragma: no cover - exercised on installs without the [train] extra
    from asearcher_plugin.agent.bases import AgentInstanceBase

from asearcher_plugin import reward_function
from asearcher_plugin.agent import observations as asearcher_format
from asearcher_plugin.agent.actions import STOP_STRINGS, parse_action, scrub
from asearcher_plugin.agent.prompts import (
    ALLOWED_ACTIONS,
    build_prompt,
    format_docs,
    information,
    invalid_feedback,
    template_for,
)
from asearcher_plugin.agent.valid_instruction import instruct, told_valid
from asearcher_plugin.records import flat_logs
from asearcher_plugin.rewards.reward import (
    METRICS,
    format_factor,
    invalid_answer_penalty,
    parse_aug,
    parse_gold,
    score_all,
)
from asearcher_plugin.settings.config import AgentConfig, load_config
from asearcher_plugin.tools.base import EXPECTED_FAILURES, failure_shown
from local_retriever.log_throttle import throttled

log = throttled(__name__)  # one WARNING per tool and error type a minute, however many trajectories fail alike


# Blocks waiting to be shown (ASearcher's queue holds 128): a model that opens pages in its summary turns
# cannot pile up page text without bound.
MAX_PENDING_BLOCKS = 128


def _throttle_key(kind: str, exc: BaseException) -> dict:
    return {"throttle_key": (kind, type(exc).__name__)}


@dataclass(frozen=True)
class StepResult:
    """What one turn gives back. `feedback` is the text the next call sees; `short` is what later calls see in its
    place (the same text, except for ASearcher-format page chunks); both are empty once `done`. `reward` is the
    final reward on the last turn, 0 before."""

    feedback: str
    short: str
    done: bool
    reward: float
    extra_logs: dict[str, float]

    def openrlhf(self) -> dict:
        """OpenRLHF's step dict (`AgentInstanceBase.step`): rewards and scores as tensors."""
        import torch

        return {
            "rewards": torch.tensor(self.reward),
            "scores": torch.tensor(self.reward),
            "environment_feedback": self.feedback,
            "feedback_short": self.short,
            "done": self.done,
            "extra_logs": self.extra_logs,
        }


class AgentInstance(AgentInstanceBase):
    """One trajectory: prompt, tool calls, counters and the final score."""

    def __init__(self, config: AgentConfig | None = None, toolbox=None, judge=None):
        self.config = config or load_config()
        self.toolbox = toolbox
        self.judge = judge  # the executor's `Judge`; without one, a client for each verdict
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
        self.told_valid = True  # whether the prompt asked for the most likely answer (valid_instruction.py)
        self.last_action = None  # the action parsed from the latest turn, for a turn hook

    async def reset(self, states: dict, **kwargs) -> dict:
        question = self.question = scrub(states["observation"])
        self.told_valid = told_valid(question, self.config.reward.valid_inst_ratio)
        observation = (
            instruct(build_prompt(self.config.agent_type, question, self.template), self.told_valid)
            if self.config.wrap_prompt
            else question
        )
        return {"observation": observation, "label": states.get("label")}

    @property
    def stop(self) -> list[str]:
        """Where the next turn ends: at the summary's </think> right after a block, else at an action's closing tag."""
        return list(asearcher_format.SUMMARY_STOP if self.summarising else STOP_STRINGS)

    async def step(self, states: dict, **kwargs) -> dict:
        """OpenRLHF's contract: `states` holds `action_text`, `label` and `ended`; the answer is its dict."""
        result = await self.turn(states.get("action_text") or "", bool(states.get("ended")), states.get("label"))
        return result.openrlhf()

    async def turn(self, action_text: str, ended: bool = False, label=None) -> StepResult:
        """One turn of the model. `ended` says the turn ended with EOS: without an action it ends the trajectory.
        `label` (the gold answers) is scored once the trajectory is done."""
        if self.asearcher_format:
            return await self._turn_asearcher(action_text, ended, label)
        self.turns += 1
        action = self.last_action = parse_action(action_text, self.allowed)
        feedback, done = "", False
        if action.kind == "invalid":
            self.invalid += 1
            feedback = invalid_feedback(action.error)
            if ended:
                self.ended_without_action = done = True
        elif action.kind == "answer":
            self.answer, done = action.argument, True
        else:
            feedback = await self._run_tool(action.kind, action.argument)
        if not done and self.turns >= self.config.max_turns:
            done = True
        return await self._result(label, feedback, feedback, done)

    async def _result(self, label, feedback: str, short: str, done: bool) -> StepResult:
        if done:
            return StepResult("", "", True, float(await self.final_reward(label)), self.extra_logs())
        return StepResult(feedback, short, False, 0.0, self.extra_logs())

    async def _turn_asearcher(self, action_text: str, ended: bool, label) -> StepResult:
        """ASearcher's loop: a turn without an action gets no text back (the next call continues the transcript),
        and a summary turn without one is what a summary turn should be."""
        summary_turn, self.summarising = self.summarising, False
        self.turns += 1
        action = self.last_action = parse_action(action_text, self.allowed)
        done = False
        if action.kind == "invalid":
            if not summary_turn:
                self.invalid += 1
            if ended:
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
        return await self._result(label, feedback, short, done)

    async def _run_tool_asearcher(self, kind: str, argument: str) -> list:
        async def run() -> list:
            if kind == "search":
                self.searches += 1
                docs = await self.toolbox.search(argument, self.config.tools.topk)
                return [asearcher_format.search_block(docs, self.config.tools.topk)]
            self.accesses += 1
            return asearcher_format.page_blocks(await self.toolbox.access(argument))

        return await self._tool(kind, argument, run, lambda text: [asearcher_format.failure_block(text)])

    async def _run_tool(self, kind: str, argument: str) -> str:
        async def run() -> str:
            if kind == "search":
                self.searches += 1
                docs = await self.toolbox.search(argument, self.config.tools.topk)
                return information(format_docs(docs, self.config.tools.max_doc_chars))
            self.accesses += 1
            return information(await self._read_page(argument))

        return await self._tool(kind, argument, run, information)

    async def _tool(self, kind: str, argument: str, run, failed):
        """One ladder for both observation formats: a failure is counted (apart when the infrastructure caused it:
        ToolUnavailable, a timeout, a socket error), logged once per kind and error type a minute, and shown to the
        model as `failed(text)`; the rollout goes on whatever the model wrote."""
        started = time.perf_counter()
        try:
            return await run()
        except EXPECTED_FAILURES as exc:
            text, infra = failure_shown(kind, exc)
            self.tool_errors += 1
            self.tool_errors_infra += infra
            log.warning("%s failed: %s: %.300s", kind, type(exc).__name__, exc, extra=_throttle_key(kind, exc))
            return failed(text)
        except Exception as exc:  # noqa: BLE001 - whatever the model wrote, the rollout must go on
            self.tool_errors += 1
            log.warning(
                "%s of %.200r raised %s: %s", kind, argument, type(exc).__name__, exc, extra=_throttle_key(kind, exc)
            )
            return failed(failure_shown(kind, exc)[0])
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
        return invalid_answer_penalty(score, self.answer, self.config.reward) if self.told_valid else score

    async def _judge(self, golds: list[str], fallback: float) -> float:
        from asearcher_plugin.rewards.judge import JudgeUnavailable, judge

        try:
            if self.judge is not None:
                return float(await self.judge(self.question, self.answer, golds))
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
