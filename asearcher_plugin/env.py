"""The agent file OpenRLHF loads with `--train.agent_func_path $(python -m asearcher_plugin.env)`.

OpenRLHF's rollout actor imports this file by path and builds `AgentExecutor()` with no
arguments; configuration comes from the YAML file named by $ASEARCHER_CONFIG. One
`AgentInstance` per trajectory holds its state; the executor owns the token loop so it can cap
each turn, stop at a closing action tag, and end with `truncated` when the budget runs out.
Neither vLLM nor Ray is imported here.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

try:  # the base classes OpenRLHF checks for; stand-ins when OpenRLHF is not installed (eval, synthesis)
    from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase
except ImportError:  # pragma: no cover - exercised on installs without the [train] extra
    from asearcher_plugin.agent.bases import AgentExecutorBase, AgentInstanceBase

from asearcher_plugin.agent.actions import STOP_STRINGS, parse_action
from asearcher_plugin.agent.prompts import (ALLOWED_ACTIONS, build_prompt, chat_feedback, chat_prompt, format_docs, information,
                                            invalid_feedback, reasoning_prompt)
from asearcher_plugin.config import AgentConfig, ConfigError, load_config
from asearcher_plugin.engines.types import with_overrides
from asearcher_plugin.reward import format_factor, parse_gold, score_all
from asearcher_plugin.tools import ToolError, make_toolbox


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
        self.tool_seconds = 0.0
        self.answer: str | None = None
        self.page_cursor: dict[str, int] = {}
        self.scores: dict[str, float] = {}
        self.question = ""

    async def reset(self, states: dict, **kwargs) -> dict:
        question = self.question = states["observation"]
        observation = build_prompt(self.config.agent_type, question) if self.config.wrap_prompt else question
        return {"observation": observation, "label": states.get("label")}

    async def step(self, states: dict, **kwargs) -> dict:
        self.turns += 1
        action = parse_action(states.get("action_text") or "", self.allowed)
        feedback, done = "", False
        if action.kind == "invalid":
            self.invalid += 1
            feedback = invalid_feedback(action.error)
        elif action.kind == "answer":
            self.answer, done = action.argument, True
        else:
            feedback = await self._run_tool(action.kind, action.argument)
        if not done and self.turns >= self.config.max_turns:
            done = True
        reward = await self.final_reward(states.get("label")) if done else 0.0
        return {"rewards": _tensor(reward), "scores": _tensor(reward), "environment_feedback": "" if done else feedback,
                "done": done, "extra_logs": self.extra_logs()}

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
            return information(f"{kind} failed: {exc or type(exc).__name__}")
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
        golds = parse_gold(label)
        self.scores = score_all(self.answer, golds)
        metric = self.config.reward.metric
        score = self.scores.get(metric, self.scores["f1"])
        if metric == "judge" and self.answer is not None:
            from asearcher_plugin.judge import JudgeUnavailable, judge

            try:
                self.scores["judge"] = score = float(await judge(self.question, self.answer, golds, self.config.reward.judge))
            except JudgeUnavailable:
                self.scores["judge_fallback"] = 1.0  # scored with F1 instead; visible in the logs
        if self.config.reward.format_factor:
            score *= format_factor(self.invalid, self.answer is not None)
        return score

    def extra_logs(self) -> dict:
        return {"turns": float(self.turns), "searches": float(self.searches), "accesses": float(self.accesses),
                "invalid_actions": float(self.invalid), "tool_errors": float(self.tool_errors),
                "tool_seconds": round(self.tool_seconds, 4), "answered": float(self.answer is not None),
                "answer_chars": float(len(self.answer or "")),
                **{f"score_{k}": v for k, v in self.scores.items()}}


class AgentExecutor(AgentExecutorBase):
    """Runs one trajectory: generate until a closing action tag, step the environment, repeat."""

    def __init__(self, config: AgentConfig | None = None, for_training: bool = True):
        self.config = config or load_config()
        if for_training and self.config.agent_type == "asearcher-reasoning":
            # Its prompt is rebuilt from the question and the last 25,000 characters of history at
            # every call, so the trajectory is not one token sequence: OpenRLHF could not mask or
            # score it. It serves evaluation and synthesis (for_training=False).
            raise ConfigError("agent_type 'asearcher-reasoning' rebuilds its prompt each call and cannot be trained "
                              "through OpenRLHF; use 'asearcher' or 'search-r1' for training")
        self._toolboxes: dict[int, object] = {}  # one per event loop: HTTP clients are loop-bound

    def _toolbox(self):
        loop = asyncio.get_running_loop()
        box = self._toolboxes.get(id(loop))
        if box is None:
            box = self._toolboxes[id(loop)] = make_toolbox(self.config)
        return box

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        if self.config.agent_type == "asearcher-reasoning":
            return await self._execute_rebuilding(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine)
        agent = AgentInstance(self.config, self._toolbox())
        observation = (await agent.reset({"observation": prompt, "label": label}))["observation"]
        chat = self.config.feedback_style == "chat"
        if chat and self.config.wrap_prompt:
            observation = chat_prompt(hf_tokenizer, observation)
        tokens = hf_tokenizer(text=observation, add_special_tokens=False)["input_ids"]
        cap = self.config.max_new_tokens_per_turn
        tokens = tokens[-max(1, max_length - min(cap, max_length // 2)):]  # leave room for at least one turn
        want_logprobs = getattr(sampling_params, "logprobs", None) is not None
        logprobs = [0.0] * len(tokens) if want_logprobs else None
        action_ranges, truncated, done, reward, result = [], False, False, 0.0, {}
        first_call_at = last_token_at = None  # wall clock, mapped to policy versions by the scheduler
        while not done:
            budget = max_length - len(tokens)
            if budget <= 0:
                truncated = True
                break
            params = with_overrides(sampling_params, max_tokens=min(cap, budget), stop=list(STOP_STRINGS),
                                    include_stop_str_in_output=True)
            first_call_at = first_call_at or time.time()
            out = (await llm_engine.generate(tokens, params)).outputs[0]
            last_token_at = time.time()
            action_ranges.append((len(tokens), len(tokens) + len(out.token_ids)))
            tokens = tokens + list(out.token_ids)
            if want_logprobs:
                logprobs += [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs or [])]
                logprobs += [0.0] * (len(tokens) - len(logprobs))
            if out.finish_reason == "length" and len(tokens) >= max_length:
                truncated = True
                break
            result = await agent.step({"observation_text": observation, "action_text": out.text, "label": label,
                                       "sampling_params": params})
            done = result["done"]
            reward = float(result["rewards"].item())
            feedback = result["environment_feedback"]
            if feedback and chat:
                feedback = chat_feedback(hf_tokenizer, feedback.strip())
            if feedback and not done:
                fb = hf_tokenizer(text=feedback, add_special_tokens=False)["input_ids"][: max_length - len(tokens)]
                tokens = tokens + fb
                if want_logprobs:
                    logprobs += [0.0] * len(fb)
            observation = observation + out.text + (feedback or "")
        if not done:
            reward = await agent.final_reward(label)  # no answer: scores 0, but the metrics are still logged
        logs = agent.extra_logs()
        logs["truncated"] = float(truncated)
        return {"prompt": prompt, "label": label, "images": images, "mm_train_inputs": None,
                "observation_tokens": tokens, "action_ranges": action_ranges, "rollout_log_probs": logprobs,
                "reward": reward, "scores": reward, "truncated": truncated, "extra_logs": logs,
                "answer": agent.answer, "text": observation, "token_times": [first_call_at, last_token_at]}

    async def _execute_rebuilding(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine):
        """The reasoning agent: each call sees the question and the recent history, rebuilt as a fresh prompt."""
        agent = AgentInstance(self.config, self._toolbox())
        agent.question = prompt
        history, done, calls, tokens_used = "", False, 0, 0
        while not done:
            text = reasoning_prompt(prompt, history)
            if getattr(hf_tokenizer, "chat_template", None):
                text = chat_prompt(hf_tokenizer, text)
            ids = hf_tokenizer(text=text, add_special_tokens=False)["input_ids"][-(max_length - 1):]
            budget = min(self.config.max_new_tokens_per_turn, max_length - len(ids))
            params = with_overrides(sampling_params, max_tokens=max(1, budget), stop=list(STOP_STRINGS),
                                    include_stop_str_in_output=True)
            out = (await llm_engine.generate(ids, params)).outputs[0]
            calls += 1
            tokens_used += len(ids) + len(out.token_ids)
            result = await agent.step({"action_text": out.text, "label": label})
            done = result["done"]
            history += out.text + (result["environment_feedback"] or "")
        reward = float(result["rewards"].item())
        logs = {**agent.extra_logs(), "llm_calls": float(calls), "tokens_processed": float(tokens_used), "truncated": 0.0}
        return {"prompt": prompt, "label": label, "reward": reward, "scores": reward, "extra_logs": logs,
                "answer": agent.answer, "text": history, "truncated": False, "observation_tokens": None,
                "action_ranges": None, "rollout_log_probs": None}


def agent_file() -> Path:
    return Path(__file__).resolve()


if __name__ == "__main__":
    print(agent_file())
