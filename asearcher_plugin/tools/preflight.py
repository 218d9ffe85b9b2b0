"""Before a rollout engine takes work: can this node reach a knowledge-base server?

A failed search is feedback to the model, so a rollout node that cannot reach the KB would train
on broken tools without a sign. OpenRLHF builds the agent in every rollout engine, on whatever
node it lands; checking there turns a wrong URL (127.0.0.1 on a multi-node run, a firewall) into
an error at start-up that names the node and the URLs.

A server is reachable when it answers a real Search-R1 request (`POST /retrieve`, one query, top 1) with a result
for that query: ours, Search-R1's and ASearcher's retrieval servers all do, and only ours has `GET /health`.
"""

from __future__ import annotations

import logging
import socket
import time

import httpx

from local_retriever.client import RetrievalError, checked_result

from ..utils.schema import ConfigError
from .config import LocalToolsConfig

log = logging.getLogger(__name__)


PROBE = {"queries": ["reachability check"], "topk": 1, "return_scores": False}


def answers_retrieve(url: str, timeout: float) -> None:
    """Raises unless `url` answers Search-R1's `/retrieve` with one result list for the one query sent."""
    response = httpx.post(url.rstrip("/") + "/retrieve", json=PROBE, timeout=timeout)
    response.raise_for_status()
    try:
        (hits,) = checked_result(response.json(), 1, "/retrieve")
    except RetrievalError as exc:
        hits = exc
    if not isinstance(hits, list):
        # Not the reply's text: a server that is not a KB (an admin page, a metadata service) is not quoted back.
        raise ValueError(
            f"POST /retrieve answered HTTP {response.status_code} ({len(response.content):,} bytes) without a result "
            "for the query: not a Search-R1-compatible retrieval server"
        )


def check_kb_reachable(local: LocalToolsConfig, attempts: int = 3, timeout: float = 10.0) -> None:
    """Passes when at least one server answers a `/retrieve` request; the others are logged. Else ConfigError."""
    problems: dict[str, str] = {}
    for attempt in range(attempts):
        for url in local.urls:
            try:
                answers_retrieve(url, timeout)
            except (httpx.HTTPError, ValueError) as exc:
                problems[url] = f"{type(exc).__name__}: {exc}"
                continue
            down = [u for u in local.urls if u in problems]
            if down:
                log.warning("KB servers unreachable from %s: %s", socket.gethostname(), down)
            return
        time.sleep(1.0 * (attempt + 1))
    raise ConfigError(
        f"no knowledge-base server reachable from node {socket.gethostname()}: "
        + "; ".join(f"{u} ({problems[u]})" for u in local.urls)
        + ". Set agent.tools.local.urls to servers every rollout node reaches "
        "(`asearcher kb serve --host 0.0.0.0` on the KB machine), or check_on_start: false"
    )
