"""The generator's moves: a base question from a page, injection of a searched fact, fuzzing.

Each returns a new `QA` or raises `BadOutput` (bad reply after retries, or a check that failed) or
`ToolError` (the search backend failed); the item loop logs either and carries on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from asearcher_plugin.tools import ToolError

from . import prompts
from .chat import BadOutput, ChatClient
from .text import contains_quote, leaks, page_chunks, same_answer, squash


@dataclass
class QA:
    question: str
    answer: str
    aliases: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    evidence: list[dict] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    edits: list[dict] = field(default_factory=list)
    injections: int = 0
    fuzzes: int = 0

    def golds(self) -> list[str]:
        return [self.answer] + [a for a in self.aliases if a != self.answer]


def _check_rewrite(old: QA, obj: dict) -> None:
    if not same_answer(obj["answer"], old.answer):
        raise BadOutput("answer changed", f"{obj['answer']!r} is not {old.answer!r}")
    if same_answer(obj["question"], old.question):
        raise BadOutput("question unchanged")
    if leaks(old.answer, obj["question"]):
        raise BadOutput("answer in question", obj["question"][:120])


async def seed_from_page(gen: ChatClient, page: dict, cfg) -> QA:
    text = page["contents"][: cfg.page_chars]

    def check(obj: dict) -> None:
        if not contains_quote(page["contents"], obj["quote"]):
            raise BadOutput("quote not in source", obj["quote"][:120])
        if leaks(obj["answer"], obj["question"]):
            raise BadOutput("answer in question", obj["question"][:120])

    obj = await gen.ask_json(
        prompts.SEED_FROM_PAGE.format(title=page["title"], text=text),
        "seed",
        {"question": str, "answer": str, "quote": str},
        check,
        cfg.output_retries,
    )
    evidence = {
        "round": 0,
        "title": page["title"],
        "url": page.get("url", ""),
        "source": "page",
        "quote": obj["quote"],
    }
    return QA(
        obj["question"].strip(),
        obj["answer"].strip(),
        facts=[obj["quote"].strip()],
        evidence=[evidence],
        entities=[page["title"]],
    )


async def inject(gen: ChatClient, tools, qa: QA, round_: int, cfg) -> QA:
    used = [e.lower() for e in qa.entities]

    def check_plan(obj: dict) -> None:
        if same_answer(obj["entity"], qa.answer):
            raise BadOutput("entity is the answer", obj["entity"])
        if obj["entity"].strip().lower() in used:
            raise BadOutput("entity already used", obj["entity"])

    plan = await gen.ask_json(
        prompts.PLAN_INJECTION.format(question=qa.question, answer=qa.answer, used=", ".join(qa.entities) or "none"),
        "inject",
        {"entity": str, "query": str},
        check_plan,
        cfg.output_retries,
    )
    docs = await tools.search(plan["query"], cfg.search_topk)
    if not docs:
        raise ToolError(f"no results for {plan['query']!r}")
    shown = [{**d, "text": d["text"][: cfg.evidence_chars], "source": "search"} for d in docs]
    shown += await read_page(tools, docs[0], plan["entity"], cfg)

    def check(obj: dict) -> None:
        if not 1 <= obj["passage"] <= len(shown):
            raise BadOutput("no such passage", str(obj["passage"]))
        if not contains_quote(shown[obj["passage"] - 1]["text"], obj["quote"]):
            raise BadOutput("quote not in source", obj["quote"][:120])
        _check_rewrite(qa, obj)

    obj = await gen.ask_json(
        prompts.COMPOSE_INJECTION.format(
            entity=plan["entity"],
            question=qa.question,
            answer=qa.answer,
            passages=prompts.numbered(shown, cfg.evidence_chars),
        ),
        "inject",
        {"passage": int, "quote": str, "fact": str, "question": str, "answer": str},
        check,
        cfg.output_retries,
    )
    doc = shown[obj["passage"] - 1]
    evidence = {
        "round": round_,
        "entity": plan["entity"],
        "query": plan["query"],
        "title": doc.get("title", ""),
        "url": doc.get("url", ""),
        "source": doc["source"],
        "quote": obj["quote"],
        "fact": obj["fact"],
    }
    return replace(
        qa,
        question=obj["question"].strip(),
        facts=qa.facts + [obj["fact"].strip()],
        evidence=qa.evidence + [evidence],
        entities=qa.entities + [plan["entity"]],
        injections=qa.injections + 1,
    )


async def read_page(tools, hit: dict, entity: str, cfg) -> list[dict]:
    """More of the top hit's page than its search passage, the parts naming the entity first, so a fact
    can come from further down the page. A page that cannot be read leaves the search passages alone."""
    if not cfg.page_passages:
        return []
    try:
        page = await tools.access(hit.get("url") or hit["title"])
    except ToolError:
        return []
    if not page:
        return []
    seen = squash(hit["text"])[:200]  # the passage search already showed
    chunks = [c for c in page_chunks(page, cfg.evidence_chars) if seen not in squash(c)]
    words = [w for w in entity.lower().split() if len(w) > 2]
    chunks.sort(key=lambda c: -sum(w in c.lower() for w in words))  # stable: page order among equals
    return [
        {"title": hit.get("title", ""), "url": hit.get("url", ""), "text": c, "source": "page"}
        for c in chunks[: cfg.page_passages]
    ]


async def fuzz(gen: ChatClient, qa: QA, round_: int, cfg) -> QA:
    def check(obj: dict) -> None:
        detail = obj["detail"].strip().lower()
        if detail not in qa.question.lower():
            raise BadOutput("detail not in question", obj["detail"][:80])
        if detail in obj["question"].lower():
            raise BadOutput("detail still in question", obj["detail"][:80])
        _check_rewrite(qa, obj)

    obj = await gen.ask_json(
        prompts.FUZZ.format(question=qa.question, answer=qa.answer),
        "fuzz",
        {"detail": str, "vaguer": str, "question": str, "answer": str},
        check,
        cfg.output_retries,
    )
    change = {"round": round_, "fuzzed": obj["detail"], "into": obj["vaguer"]}
    return replace(qa, question=obj["question"].strip(), edits=qa.edits + [change], fuzzes=qa.fuzzes + 1)
