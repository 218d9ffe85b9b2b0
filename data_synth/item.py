"""One seed through the loop: validate it, then up to `rounds` injections and fuzzes, each validated.

A candidate that passes quality and uniqueness replaces the current question, whether or not it is
hard yet: questions get hard step by step. Only accepted questions answered without tools at most
`max_solve_rate` of the time are emitted. The result is a `SynthItem` (records.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from asearcher_plugin.tools import ToolBox, ToolError, ToolUnavailable

from .chat import BadOutput, ChatClient, EndpointUnavailable, UsageLog
from .config import SynthConfig
from .records import Round, SynthItem, Variant
from .steps import QA, fuzz, inject, seed_from_page
from .validate import difficulty, quality, uniqueness

# The item fails (tried again on resume) rather than losing candidates: none of these is the generator's doing.
INFRA_ERRORS = (EndpointUnavailable, ToolUnavailable, ConnectionError, TimeoutError, OSError)


@dataclass
class Context:
    cfg: SynthConfig
    generator: ChatClient
    judge: ChatClient
    tools: ToolBox


async def validate(ctx: Context, gen: ChatClient, judge: ChatClient, qa: QA) -> dict:
    """Quality, then difficulty, then uniqueness of the wrong answers; stops at the first failure."""
    verdicts: dict = {"quality": await quality(judge, qa, ctx.cfg)}
    if not verdicts["quality"]["passed"]:
        return {**verdicts, "passed": False, "reason": "quality: " + ", ".join(verdicts["quality"]["failed"])}
    verdicts["difficulty"] = await difficulty(gen, judge, qa, ctx.cfg)
    wrong = [a for a, ok in zip(verdicts["difficulty"]["answers"], verdicts["difficulty"]["correct"]) if not ok]
    verdicts["uniqueness"] = await uniqueness(judge, qa, wrong, ctx.cfg)
    if not verdicts["uniqueness"]["passed"]:
        return {**verdicts, "passed": False, "reason": "uniqueness: another answer also fits"}
    return {**verdicts, "passed": True, "reason": ""}


async def synth_item(ctx: Context, seed: dict) -> SynthItem:
    started = time.perf_counter()
    usage = UsageLog()
    gen, judge = ctx.generator.for_item(usage), ctx.judge.for_item(usage)
    result = SynthItem(seed_id=seed["id"], source="page" if "page" in seed else "seed")
    try:
        await _loop(ctx, gen, judge, seed, result)
    except INFRA_ERRORS as exc:
        result.status, result.reason = "failed", f"{type(exc).__name__}: {exc}"
    result.usage = usage.as_dict()
    result.seconds = round(time.perf_counter() - started, 3)
    return result


async def _loop(ctx: Context, gen: ChatClient, judge: ChatClient, seed: dict, result: SynthItem) -> None:
    cfg = ctx.cfg
    try:
        if "page" in seed:
            qa = await seed_from_page(gen, seed["page"], cfg)
        else:
            qa = QA(
                seed["question"],
                seed["answer"],
                aliases=seed.get("aliases", []),
                facts=[f"{seed['question']} {seed['answer']}"],
            )
        verdicts = await validate(ctx, gen, judge, qa)
    except BadOutput as exc:
        result.status, result.reason, result.detail = "dropped", f"seed: {exc.code}", exc.detail
        return
    result.seed = {"question": qa.question, "answer": qa.answer}
    result.rounds.append(
        Round(0, "seed", "accepted" if verdicts["passed"] else "rejected", verdicts["reason"], qa.question, verdicts)
    )
    if not verdicts["passed"]:
        result.status, result.reason = "dropped", f"seed: {verdicts['reason']}"
        return
    solve = verdicts["difficulty"]["solve_rate"]
    if solve <= cfg.max_solve_rate:
        result.variants.append(Variant(qa, 0, solve))
    for r in range(1, cfg.rounds + 1):
        if solve == 0 and cfg.stop_when_unsolved:
            break
        action = cfg.actions[(r - 1) % len(cfg.actions)]
        try:
            candidate = await (inject(gen, ctx.tools, qa, r, cfg) if action == "inject" else fuzz(gen, qa, r, cfg))
            verdicts = await validate(ctx, gen, judge, candidate)
        except ToolUnavailable:
            raise  # the search tool's endpoints are down: not a bad candidate
        except (BadOutput, ToolError) as exc:
            code = exc.code if isinstance(exc, BadOutput) else "search failed"
            result.rounds.append(Round(r, action, "dropped", f"{action}: {code}", detail=str(exc)[:300]))
            continue
        accepted = verdicts["passed"]
        result.rounds.append(
            Round(r, action, "accepted" if accepted else "rejected", verdicts["reason"], candidate.question, verdicts)
        )
        if accepted:
            qa, solve = candidate, verdicts["difficulty"]["solve_rate"]
            if solve <= cfg.max_solve_rate:
                result.variants.append(Variant(qa, r, solve))
    result.variants = result.variants[-cfg.max_variants_per_seed :]
    result.status = "done" if result.variants else "dropped"
    result.reason = "" if result.variants else "never hard enough"
