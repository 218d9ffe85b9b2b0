"""A teacher for the SFT tests: the scripted reference policy answering capital-city questions through the real eval
runner and agent, its searches answered by a small knowledge-base server on loopback, every model call recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastapi import FastAPI

from asearcher_plugin.agent.reference_policy import ReferencePolicy
from asearcher_plugin.settings.config import AgentConfig
from tests.helpers import serve_app

PAGES = {
    "Angola": "Angola is a country in Southern Africa. The capital and largest city of Angola is Luanda.",
    "Algeria": "Algeria is a country in North Africa. Its capital and most populous city is Algiers.",
    "Austria": "Austria is a country in Central Europe. Vienna is its capital and largest city.",
    "Andorra": "Andorra is a microstate in the Pyrenees. Its capital is Andorra la Vella.",
}
ITEMS = [
    {"dataset": "t", "id": f"q{i}", "question": f"What is the capital of {name}?", "golden_answers": [answer]}
    for i, (name, answer) in enumerate(
        [("Angola", "Luanda"), ("Algeria", "Algiers"), ("Austria", "Vienna"), ("Andorra", "Andorra la Vella")]
    )
]


def kb_app() -> FastAPI:
    """Search-R1's /retrieve: the page named in the query first, then the others."""
    app = FastAPI()

    @app.post("/retrieve")
    async def retrieve(body: dict):
        out = []
        for query in body["queries"]:
            names = sorted(PAGES, key=lambda n: n not in query)[: body.get("topk", 3)]
            out.append(
                [{"document": {"id": n, "contents": f'"{n}"\n{PAGES[n]}', "title": n}, "score": 1.0} for n in names]
            )
        return {"result": out}

    return app


class RecordingPolicy(ReferencePolicy):
    """The reference policy, keeping every call: the ids it was given and the ids it returned."""

    calls: list

    async def generate(self, prompt_token_ids, sampling_params):
        out = await super().generate(prompt_token_ids, sampling_params)
        self.calls.append((list(prompt_token_ids), list(out.outputs[0].token_ids)))
        return out


def agent_config(url: str) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "agent_type": "search-r1",
            "max_turns": 4,
            "max_new_tokens_per_turn": 64,
            "tools": {"backend": "local", "topk": 2, "local": {"urls": [url]}},
            "reward": {"metric": "f1", "format_factor": True},
        }
    )


def teach(out: Path, tokenizer, k: int = 2, wrong_rate: float = 0.3, items: list[dict] = ITEMS) -> list:
    """The teacher's eval of `items` into `out` (k seeds); returns the recorded calls (prompt ids, generated ids)."""
    from asearcher_plugin.eval.runner import run_eval

    with serve_app(kb_app()) as url:
        config = agent_config(url)
        engine = RecordingPolicy.for_items(tokenizer, config, items, wrong_rate=wrong_rate)
        engine.calls = []
        asyncio.run(run_eval(items, config, engine, tokenizer, out, k=k, max_length=2048, progress=False))
    return engine.calls
