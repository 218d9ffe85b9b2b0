"""A local server speaking the OpenAI chat-completions wire format with scripted, prompt-driven replies.

It plays both synthesis models, so `asearcher synth` runs offline: for demos, tests and benchmarks
(`python -m data_synth.scripted_chat --port 8001`, then `--generator-url/--judge-url http://127.0.0.1:8001/v1`).
Its rules are simple enough for tests to predict: injections add
"(clue: ...)" clauses quoting a retrieved passage, fuzzing hides a year or a name, and the tool-free
"strong model" knows the answer to a question with no clue, half the time with one, never with two.
Markers in a question trigger failures: BADQUALITY, AMBIGUOUS, CHANGEANSWER. `faults` maps a task
to replies served first, whatever the prompt (e.g. malformed JSON).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

STOP = {"What", "Which", "When", "Who", "Where", "How", "In", "The", "A", "An", "Of", "Is", "Was", "Did", "For"}
WRONG = ["Paris", "Berlin"]


def _field(prompt: str, name: str) -> str:
    m = re.search(rf"^{name}: (.*)$", prompt, re.M)
    return m.group(1).strip() if m else ""


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 5]


class ScriptedChat:
    def __init__(
        self, faults: dict[str, list[str]] | None = None, gold: dict[str, str] | None = None, delay: float = 0.0
    ):
        self.delay = delay  # seconds per call, as a served model would take
        self.faults = {k: list(v) for k, v in (faults or {}).items()}
        self.gold = dict(gold or {})  # question -> answer the "strong model" knows
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat)

    def _task(self, prompt: str) -> str:
        if prompt.startswith("You are grading"):
            return "grade"
        m = re.match(r"### TASK: (\w+)", prompt)
        return m.group(1) if m else "unknown"

    async def chat(self, request: Request):
        body = await request.json()
        if self.delay:
            await asyncio.sleep(self.delay)
        messages = body["messages"]
        prompt = messages[0]["content"]
        task = self._task(prompt)
        n = int(body.get("n", 1))
        with self.lock:
            self.calls[task] = self.calls.get(task, 0) + 1
            fault = self.faults.get(task, []).pop(0) if self.faults.get(task) else None
        if fault == "HTTP 503":
            return JSONResponse({"error": "overloaded"}, status_code=503)
        texts = [fault] if fault is not None else [getattr(self, task)(prompt, i) for i in range(n)]
        used = sum(len(m["content"]) for m in messages) // 4
        return {
            "id": "chat-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                for i, t in enumerate(texts)
            ],
            "usage": {"prompt_tokens": used, "completion_tokens": sum(len(t) for t in texts) // 4},
        }

    def _remember(self, question: str, answer: str) -> str:
        with self.lock:
            self.gold[question] = answer
        return question

    def seed_from_page(self, prompt: str, _: int) -> str:
        title = _field(prompt, "Page title")
        text = prompt.split("Page text:\n", 1)[1].split("\n\nReply with JSON", 1)[0]
        for sentence in _sentences(text):
            year = re.search(r"\b(1[5-9]\d\d|20\d\d)\b", sentence)
            if year:
                clue = sentence.replace(year.group(1), "a certain year")
                q = self._remember(f"According to the article on {title}, in what year: {clue}", year.group(1))
                reply = json.dumps({"question": q, "answer": year.group(1), "quote": sentence})
                return f"<think>the page gives a year</think>{reply}"
        return "I could not find anything."

    def plan_injection(self, prompt: str, _: int) -> str:
        question, answer = _field(prompt, "Question"), _field(prompt, "Answer")
        used = {u.strip().lower() for u in _field(prompt, "Entities already used").split(",")}
        for word in re.findall(r"\b[A-Z][a-z]{3,}\b", question):
            if word not in STOP and word.lower() not in used and word.lower() not in answer.lower():
                return json.dumps({"entity": word, "query": word})
        return json.dumps({"entity": "history", "query": "history"})

    def compose_injection(self, prompt: str, _: int) -> str:
        question, answer = _field(prompt, "Question"), _field(prompt, "Answer")
        passages = re.findall(r"^\[(\d+)\] ([^:\n]*): (.*)$", prompt, re.M)
        if "(clue" in question:
            passages = passages[::-1]  # a second injection takes its fact from further down the read page
        for number, title, text in passages:
            for sentence in _sentences(text):
                if answer.lower() not in sentence.lower():
                    new = question.rstrip("?") + f" (clue: linked to {title})?"
                    if "CHANGEANSWER" in question:
                        answer = "something else"
                    self._remember(new, answer)
                    return (
                        "```json\n"
                        + json.dumps(
                            {
                                "passage": int(number),
                                "quote": sentence,
                                "fact": sentence,
                                "question": new,
                                "answer": answer,
                            }
                        )
                        + "\n```"
                    )
        return json.dumps(
            {"passage": 1, "quote": "nothing usable", "fact": "", "question": question, "answer": answer}
        )

    def fuzz(self, prompt: str, _: int) -> str:
        question, answer = _field(prompt, "Question"), _field(prompt, "Answer")
        if "CHANGEANSWER" in question:
            answer = "something else"
        year = re.search(r"\b(1[5-9]\d\d|20\d\d)\b", question)
        names = [w for w in re.findall(r"\b[A-Z][a-z]{3,}\b", question) if w not in STOP]
        detail = year.group(1) if year else (names[-1] if names else question.split()[-1])
        vaguer = "a certain period" if year else "a certain one"
        new = question.replace(detail, vaguer)
        self._remember(new, answer)
        return json.dumps({"detail": detail, "vaguer": vaguer, "question": new, "answer": answer})

    def quality(self, prompt: str, _: int) -> str:
        ok = "BADQUALITY" not in _field(prompt, "Question")
        return json.dumps(
            {
                "fluent": ok,
                "self_contained": True,
                "time_anchored": True,
                "coherent": True,
                "reason": "reads well" if ok else "garbled",
            }
        )

    def direct_answer(self, prompt: str, i: int) -> str:
        question = _field(prompt, "Question")
        clues = question.count("(clue") + question.count("a certain")
        knows = question in self.gold and (clues == 0 or (clues == 1 and i % 2 == 0))
        return json.dumps({"answer": self.gold[question] if knows else WRONG[i % 2]})

    def grade(self, prompt: str, _: int) -> str:
        golds = _field(prompt, "Gold answers").lower()
        prediction = _field(prompt, "Predicted answer").lower()
        ok = bool(prediction) and prediction in golds
        return json.dumps({"verdict": "correct" if ok else "incorrect", "reason": "compared"})

    def uniqueness(self, prompt: str, _: int) -> str:
        valid = "AMBIGUOUS" in _field(prompt, "Question") and _field(prompt, "Other answer") == "Berlin"
        return json.dumps({"also_valid": valid, "reason": "Berlin fits too" if valid else "does not fit"})


def main(argv: list[str] | None = None) -> None:
    import argparse

    import uvicorn

    ap = argparse.ArgumentParser(description="Serve the scripted synthesis models on /v1/chat/completions.")
    ap.add_argument("--port", type=int, default=8001, help="port on 127.0.0.1")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds before each reply, as a served model takes")
    ap.add_argument("--seeds", default=None, help="seed JSONL whose question/answer pairs the strong model knows")
    args = ap.parse_args(argv)
    gold = {}
    if args.seeds:
        with open(args.seeds, encoding="utf-8") as f:
            gold = {row["question"]: row["answer"] for row in map(json.loads, f) if "question" in row}
    uvicorn.run(
        ScriptedChat(gold=gold, delay=args.delay).app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
