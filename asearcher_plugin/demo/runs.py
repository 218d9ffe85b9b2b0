"""Runs of the demo: each is one trajectory of the training and eval `AgentExecutor`, streamed through its turn hook.

A run belongs to the page (WebSocket) that started it: stopping it, or closing the page, cancels its task, and the
cancellation reaches the engine (an in-process model stops at the next token, a server request is dropped). A
finished run keeps the `trajectories.jsonl` line `asearcher eval` would have written for it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..agent.executor import AgentExecutor
from ..engines.openai import EngineUnavailable
from ..engines.types import SamplingParams
from ..records import EvalRow
from ..settings.config import AgentConfig
from .endpoints import Endpoints
from .models import ModelError, Models
from .redact import redact
from .requests import RunRequest

log = logging.getLogger(__name__)

MAX_ACTIVE_RUNS = 8
KEEP_FINISHED = 200  # finished runs kept for saving; the oldest go first
ACTIVE = ("preparing", "running")
DEMO_DATASET = "demo"  # the `dataset` of a saved run's line


@dataclass
class Run:
    id: str
    request: RunRequest
    owner: object
    send: Callable[[dict], None]
    status: str = "preparing"
    events: list[dict] = field(default_factory=list)
    row: EvalRow | None = None
    task: asyncio.Task | None = None
    started: float = field(default_factory=time.monotonic)

    def emit(self, kind: str, **data) -> None:
        event = {"run": self.id, "type": kind, "t": round(time.monotonic() - self.started, 3), **data}
        self.events.append(event)
        self.send(event)

    def line(self) -> str:
        """The run as the JSON line `asearcher eval` appends to trajectories.jsonl."""
        return redact(json.dumps(self.row.to_json(), ensure_ascii=False, default=str))


class RunLimit(RuntimeError):
    pass


class RunManager:
    def __init__(self, models: Models, endpoints: Endpoints):
        self.models, self.endpoints = models, endpoints
        self.runs: OrderedDict[str, Run] = OrderedDict()
        self._ids = itertools.count(1)

    def active(self) -> list[Run]:
        return [r for r in self.runs.values() if r.status in ACTIVE]

    def start(self, request: RunRequest, owner, send: Callable[[dict], None]) -> Run:
        if len(self.active()) >= MAX_ACTIVE_RUNS:
            raise RunLimit(f"{MAX_ACTIVE_RUNS} runs are already in progress; stop one or wait for one to finish")
        request = self.endpoints.check(request)
        run = Run(f"r{next(self._ids)}", request, owner, send)
        self.runs[run.id] = run
        self._forget_old()
        run.task = asyncio.create_task(self._drive(run), name=f"demo run {run.id}")
        return run

    def stop(self, run_id: str) -> bool:
        run = self.runs.get(run_id)
        if run is None or run.status not in ACTIVE or run.task is None:
            return False
        run.task.cancel()
        return True

    def stop_owner(self, owner) -> list[Run]:
        """Every active run of a page that went away."""
        runs = [r for r in self.active() if r.owner is owner]
        for run in runs:
            run.task.cancel()
        return runs

    async def shutdown(self) -> None:
        tasks = [r.task for r in self.active() if r.task]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _forget_old(self) -> None:
        done = [k for k, r in self.runs.items() if r.status not in ACTIVE]
        for key in done[: max(0, len(done) - KEEP_FINISHED)]:
            del self.runs[key]

    def agent_config(self, request: RunRequest) -> AgentConfig:
        kb_url = request.tools.kb_url or self.endpoints.default_kb_url
        return AgentConfig.model_validate(
            {
                "agent_type": request.agent_type,
                "max_turns": request.max_turns,
                "max_new_tokens_per_turn": request.max_new_tokens_per_turn,
                # One retry and a short timeout: a KB that goes away mid-run shows as a failed search at once.
                "tools": {
                    "backend": request.tools.backend,
                    "local": {"urls": [kb_url], "retries": 1, "timeout": 10.0, "check_on_start": False},
                },
                "reward": {"metric": "f1"},
            }
        )

    async def _drive(self, run: Run) -> None:
        request, executor, engine = run.request, None, None
        try:
            config = self.agent_config(request)
            await self._check_tools(run, config)
            run.emit("status", text="loading the model (once: later runs reuse it)")
            engine = await self.models.engine(request.model, request.agent_type, request.question, request.golds)
            run.status = "running"
            run.emit("started", model=engine.label, agent_type=request.agent_type, tools=_tools_label(config))
            executor = AgentExecutor(config, for_training=False)
            params = SamplingParams(temperature=request.temperature, top_p=0.95, max_tokens=None, seed=request.seed)

            async def on_turn(turn) -> None:
                run.emit("turn", **turn.to_json())

            began = time.perf_counter()
            trajectory = await executor.run(
                request.question,
                request.golds,
                params,
                request.max_length,
                engine.tokenizer,
                engine.engine,
                on_turn=on_turn,
            )
            row = EvalRow(DEMO_DATASET, run.id, request.seed, request.question, request.golds)
            row.record(trajectory)
            row.seconds = round(time.perf_counter() - began, 3)
            run.row, run.status = row, "finished"
            run.emit(
                "finished",
                answer=trajectory.answer,
                golds=request.golds,
                scores=trajectory.scores if request.golds else None,
                reward=trajectory.reward if request.golds else None,
                stats=trajectory.stats,
                truncated=trajectory.truncated,
                notes=_notes(trajectory, request),
            )
        except asyncio.CancelledError:
            run.status = "stopped"
            run.emit("stopped", text="stopped; the model was told to stop generating")
        except (ModelError, EngineUnavailable, ToolsDown) as exc:
            run.status = "error"
            run.emit("error", text=str(exc))
        except Exception as exc:  # noqa: BLE001 - one broken run must not take the server down
            log.exception("demo run %s failed", run.id)
            run.status = "error"
            run.emit("error", text=f"the run failed: {type(exc).__name__}: {str(exc)[:500]}")
        finally:
            for closer in (executor.aclose if executor else None, engine.close if engine else None):
                try:
                    if closer is not None:
                        await closer()
                except Exception:  # noqa: BLE001 - closing clients must not hide the run's outcome
                    log.debug("closing after run %s failed", run.id, exc_info=True)

    async def _check_tools(self, run: Run, config: AgentConfig) -> None:
        if config.tools.backend == "local":
            url = config.tools.local.urls[0]
            run.emit("status", text=f"checking the knowledge base at {url} (its first search loads the encoder)")
            from ..tools.preflight import answers_retrieve

            try:
                await asyncio.to_thread(answers_retrieve, url, 5.0)
            except Exception as exc:  # noqa: BLE001 - connection refused, a non-KB server, a bad reply: all one news
                # The exception's type only: its text may quote what the server answered, which is not the page's.
                raise ToolsDown(
                    f"knowledge base at {url} is not reachable or not a KB server ({type(exc).__name__}); "
                    "start one with `asearcher kb serve`"
                ) from None
            return
        import os

        web = config.tools.web
        missing = [name for name in (web.serper_api_key_env, web.jina_api_key_env) if not os.environ.get(name)]
        if missing:
            run.emit(
                "notice",
                text=f"{' and '.join(missing)} not set in the server's environment: those web tool calls will fail, "
                "and the turns show the failure as the agent sees it",
            )


class ToolsDown(RuntimeError):
    pass


def _tools_label(config: AgentConfig) -> str:
    if config.tools.backend == "local":
        return f"knowledge base {config.tools.local.urls[0]} (top {config.tools.topk})"
    return "web search and page reading (Serper, Jina)"


def _notes(trajectory, request: RunRequest) -> list[str]:
    """Why a run ended as it did, when the numbers alone do not say."""
    stats, notes = trajectory.stats, []
    turns, invalid = int(stats.get("turns", 0)), int(stats.get("invalid_actions", 0))
    if trajectory.answer is None:
        if turns and invalid >= turns and not stats.get("searches") and not stats.get("accesses"):
            notes.append(
                f"The model never wrote a valid action in {turns} turn(s): it did not search, read or answer. "
                "A randomly initialised model (the tiny CPU model) does this; pick the scripted reference policy "
                "or a served model to see a real search."
            )
        elif stats.get("ended_without_action"):
            notes.append("The model ended its turn without an action, so the trajectory ended without an answer.")
        elif trajectory.truncated:
            notes.append(f"The token budget ({request.max_length} tokens) ran out before an answer.")
        else:
            notes.append(f"No answer within {request.max_turns} turns.")
    if stats.get("tool_errors"):
        notes.append(f"{int(stats['tool_errors'])} tool call(s) failed; the turns show what the agent was told.")
    if not request.golds:
        notes.append("No gold answer given: the answer is not scored.")
    return notes
