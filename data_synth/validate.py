"""The three gates a candidate question passes: quality, difficulty, uniqueness.

Each returns a verdict dict that goes into the item's log as it is, so every decision can be
read back with its reason.
"""

from __future__ import annotations

import asyncio

from asearcher_plugin.rewards.judge import Judge, JudgeUnavailable
from asearcher_plugin.rewards.reward import normalize_answer
from asearcher_plugin.settings.config import JudgeConfig

from . import prompts
from .chat import BadOutput, ChatClient, EndpointUnavailable, extract_json
from .steps import QA

QUALITY_FIELDS = ("fluent", "self_contained", "time_anchored", "coherent")


async def quality(judge: ChatClient, qa: QA, cfg) -> dict:
    obj = await judge.ask_json(
        prompts.QUALITY.format(facts=prompts.fact_lines(qa.facts), question=qa.question, answer=qa.answer),
        "quality",
        {**{f: bool for f in QUALITY_FIELDS}, "reason": str},
        retries=cfg.output_retries,
    )
    failed = [f for f in QUALITY_FIELDS if not obj[f]]
    return {"passed": not failed, "failed": failed, "reason": obj["reason"]}


def parse_direct_answer(text: str) -> str:
    """The `answer` of a tool-free reply; a reply without one is an empty (wrong) answer."""
    try:
        value = extract_json(text).get("answer", "")
    except BadOutput:
        return ""
    return value.strip() if isinstance(value, str) else str(value)


def grading_config(judge_endpoint) -> JudgeConfig:
    """The project's judge (`asearcher_plugin.rewards.judge`, verdict format) on the synthesis judge's endpoint,
    greedy."""
    ep = judge_endpoint.cfg
    return JudgeConfig(
        base_urls=ep.base_urls,
        model=ep.model,
        api_key_env=ep.api_key_env,
        timeout=ep.timeout,
        retries=ep.retries,
        verdict_format="verdict",
        temperature=0.0,
        top_p=ep.top_p,
        max_tokens=ep.max_tokens,
    )


async def _grade(judge_chat: ChatClient, qa: QA, prediction: str) -> bool:
    if not prediction:
        return False
    if normalize_answer(prediction) in {normalize_answer(g) for g in qa.golds()}:
        return True
    try:
        return await Judge(grading_config(judge_chat), judge_chat.endpoint("grade"))(
            qa.question, prediction, qa.golds()
        )
    except JudgeUnavailable as exc:
        if exc.no_verdict:
            raise BadOutput("no verdict", f"judge gave no verdict on {prediction!r}") from None
        raise EndpointUnavailable(str(exc)) from None


async def difficulty(gen: ChatClient, judge: ChatClient, qa: QA, cfg) -> dict:
    """k tool-free answers from the generator, each graded against the gold answers."""
    texts = await gen.complete(
        [{"role": "user", "content": prompts.DIRECT_ANSWER.format(question=qa.question)}], "difficulty", n=cfg.k
    )
    answers = [parse_direct_answer(t) for t in texts]
    distinct = list(dict.fromkeys(answers))
    grades = dict(zip(distinct, await asyncio.gather(*(_grade(judge, qa, a) for a in distinct))))
    correct = [grades[a] for a in answers]
    return {"solve_rate": sum(correct) / len(correct), "answers": answers, "correct": correct}


async def uniqueness(judge: ChatClient, qa: QA, wrong: list[str], cfg) -> dict:
    """Wrong tool-free answers must really be wrong: if one also fits, the question is ambiguous."""
    seen, checks = set(), []
    for ans in wrong:
        key = normalize_answer(ans)
        if key and key not in seen and len(checks) < cfg.max_uniqueness_checks:
            seen.add(key)
            checks.append(ans)
    replies = await asyncio.gather(
        *(
            judge.ask_json(
                prompts.UNIQUENESS.format(
                    facts=prompts.fact_lines(qa.facts), question=qa.question, answer=qa.answer, candidate=ans
                ),
                "uniqueness",
                {"also_valid": bool, "reason": str},
                retries=cfg.output_retries,
            )
            for ans in checks
        )
    )
    valid = [{"answer": a, "reason": r["reason"]} for a, r in zip(checks, replies) if r["also_valid"]]
    return {"passed": not valid, "checked": checks, "also_valid": valid}
