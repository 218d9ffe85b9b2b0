"""Every prompt of the synthesis agent, in one place.

Each prompt starts with a `### TASK:` line naming it (handy in server logs) and asks for one JSON
object. `ask_json` checks the fields and types listed beside each prompt, then the step's own checks;
a reply that fails is shown its reason and re-asked (`output_retries` times), then the candidate is
dropped with that reason counted in `stats.json`.

| prompt | model | reply fields | checks after parsing |
|---|---|---|---|
| `SEED_FROM_PAGE` | generator | question, answer, quote | quote is verbatim in the page; answer not in question |
| `PLAN_INJECTION` | generator | entity, query | entity is not the answer and not used before |
| `COMPOSE_INJECTION` | generator | passage, quote, fact, question, answer | passage exists; quote verbatim in it; answer unchanged; question changed; answer not in question |
| `FUZZ` | generator | detail, vaguer, question, answer | detail was in the question and is gone; answer unchanged; answer not in question |
| `QUALITY` | judge | fluent, self_contained, time_anchored, coherent, reason | all four true to pass |
| `DIRECT_ANSWER` | generator, k samples | answer | none: an unparseable reply counts as a wrong answer |
| grading | judge | verdict, reason | `asearcher_plugin.rewards.judge.JUDGE_PROMPT`, the one eval uses; exact matches skip it |
| `UNIQUENESS` | judge | also_valid, reason | a wrong tool-free answer that is also valid rejects the question |
"""

SEED_FROM_PAGE = """### TASK: seed_from_page
Write one simple factual question answered by the Wikipedia page below.
- The answer is a short entity, name, date or number stated in the page, and it is the only correct answer.
- The question names enough context to be understood alone and does not contain the answer.
- `quote` is a sentence copied exactly from the page that states the answer.

Page title: {title}
Page text:
{text}

Reply with JSON only: {{"question": "...", "answer": "...", "quote": "..."}}"""

PLAN_INJECTION = """### TASK: plan_injection
We make a question harder by adding facts about the things it mentions, so that answering it takes
more searching. The answer must stay the same.

Question: {question}
Answer: {answer}
Entities already used: {used}

Pick one entity mentioned in the question (not the answer, not one already used) and write a search
query that finds a further, less well-known fact about it.
Reply with JSON only: {{"entity": "...", "query": "..."}}"""

COMPOSE_INJECTION = """### TASK: compose_injection
Rewrite the question so it also depends on one new fact about "{entity}" taken from the passages below:
either add the fact as an extra condition or refer to "{entity}" through the fact instead of its name.

Question: {question}
Answer: {answer}

Passages:
{passages}

Rules: the answer stays exactly "{answer}" and must not appear in the question; the question must
read naturally and stand on its own; `quote` is copied exactly from the passage you used.
Reply with JSON only: {{"passage": <number>, "quote": "...", "fact": "<the new fact in one sentence>", "question": "...", "answer": "{answer}"}}"""

FUZZ = """### TASK: fuzz
Make the question harder to answer from memory by obscuring one precise detail: turn an exact date
into a period, a number into a range, or a name into a description. Change nothing else; the answer
must stay exactly "{answer}" and stay the only correct answer.

Question: {question}
Answer: {answer}

`detail` is the exact text you replaced (copied from the question) and `vaguer` what replaced it.
Reply with JSON only: {{"detail": "...", "vaguer": "...", "question": "...", "answer": "{answer}"}}"""

QUALITY = """### TASK: quality
Judge this quiz question for a training set. Facts it is built from:
{facts}

Question: {question}
Answer: {answer}

- fluent: grammatical and natural English.
- self_contained: understandable without any other text (no "this page", "the passage", "the above").
- time_anchored: no time-relative wording ("currently", "last year", "recent") without a date.
- coherent: the conditions are consistent with each other and with the facts, and lead to the answer.
Reply with JSON only: {{"fluent": true|false, "self_contained": true|false, "time_anchored": true|false, "coherent": true|false, "reason": "<one sentence>"}}"""

DIRECT_ANSWER = """### TASK: direct_answer
Answer the question from your own knowledge, without searching. Give your best single guess.

Question: {question}

End your reply with JSON: {{"answer": "<short answer>"}}"""

UNIQUENESS = """### TASK: uniqueness
A quiz question has the reference answer below. Someone answered differently. Decide whether their
answer also satisfies every condition of the question, i.e. whether the question has more than one
valid answer. Facts the question is built from:
{facts}

Question: {question}
Reference answer: {answer}
Other answer: {candidate}

Reply with JSON only: {{"also_valid": true|false, "reason": "<one sentence>"}}"""


def numbered(passages: list[dict], chars: int) -> str:
    # one line each: the quote check ignores whitespace, so flattening loses nothing
    return "\n".join(f"[{i}] {p['title']}: {' '.join(p['text'][:chars].split())}" for i, p in enumerate(passages, 1))


def fact_lines(facts: list[str]) -> str:
    return "\n".join(f"- {f}" for f in facts) or "- (none recorded)"
