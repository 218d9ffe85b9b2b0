"""Faults: what good traffic loses when bad requests, a dying replica or slow clients share the KB server.

One command: `python benchmarks/faults.py [--requests 2000] [--clients 32]`. Every scenario runs real
`asearcher kb serve` processes over the sample KB on loopback:

- poison: good searches and page reads mixed with lone surrogates, malformed URLs, deep JSON, bodies over
  the limit, non-UTF-8, and Content-Length lies, all on one server;
- replica kill: the good searches through `RetrievalClient` over two servers, one killed with SIGKILL a
  quarter of the way in;
- slow-loris: the good searches while hundreds of connections send headers one byte at a time, or
  nothing, or stop halfway;
- KB down mid-training: a CPU training run through OpenRLHF's own `train()` whose KB server is killed and started
  again (benchmarks/train_outage.py): nothing that failed for the infrastructure may reach the trainer.

`--scenarios` runs some of them; the rows of the others are kept from the last run that measured them
(benchmarks/results/faults.json), and the note says when that was.

Tried: requests sent. Failed: good requests answered with anything but their result, or bad requests
answered 5xx (through the client: attempts that failed and were retried). Lost: requests that got no
result at all. 0 lost is the bar.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from datetime import date
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import train_outage  # noqa: E402
from benchmarks.readme_table import publish  # noqa: E402
from local_retriever.build import ensure_sample_kb  # noqa: E402
from local_retriever.client import RetrievalClient  # noqa: E402
from local_retriever.sample import load_sample_questions  # noqa: E402
from local_retriever.server_process import serving  # noqa: E402

QUESTIONS = [q["question"] for q in load_sample_questions()]
TITLES = ["Albert Einstein", "Angola", "Atlantic Ocean", "Algorithm"]
MAX_BODY = 1024 * 1024
POISON = [
    ("/retrieve", b'{"queries": ["x\\ud800y"], "topk": 2}'),
    ("/retrieve", b'{"queries": ["ocean", "\\udfff"]}'),
    ("/access", b'{"urls": ["Angola", "\\ud800"]}'),
    ("/access", b'{"urls": ["http://[::1"]}'),
    ("/access", b'{"urls": ["http://a..b/", "http://example.org:99999/", "http://x:abc/"]}'),
    ("/retrieve", b'{"queries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("/retrieve", b'{"queries": ["' + b"a" * (MAX_BODY + 10) + b'"]}'),
    ("/retrieve", b"\xff\xfe not utf-8"),
]
LIE = b'POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"que'


def kb_serve(kb_dir: Path, *flags: str):
    return serving(kb_dir, "hybrid", list(flags), timeout=600)


class Tally:
    def __init__(self):
        self.tried = self.failed = self.lost = 0

    def row(self, scenario: str, traffic: str, note: str) -> list:
        return [scenario, traffic, self.tried, self.failed, f"**{self.lost}**", note]


async def good_traffic(url: str, n: int, clients: int, tally: Tally) -> None:
    limits = httpx.Limits(max_connections=clients, keepalive_expiry=2.0)  # below the server's keep-alive
    gate = asyncio.Semaphore(clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:

        async def one(i: int):
            async with gate:
                tally.tried += 1
                try:
                    if i % 8 == 7:
                        title = TITLES[i % len(TITLES)]
                        r = await http.post(f"{url}/access", json={"urls": [title]})
                        ok = r.status_code == 200 and (r.json()["result"][0] or {}).get("title") == title
                    else:
                        r = await http.post(
                            f"{url}/retrieve", json={"queries": [QUESTIONS[i % len(QUESTIONS)]], "topk": 3}
                        )
                        ok = r.status_code == 200 and len(r.json()["result"][0]) == 3
                except httpx.HTTPError:
                    tally.lost += 1
                    return
                if not ok:
                    tally.failed += 1
                    tally.lost += 1

        await asyncio.gather(*(one(i) for i in range(n)))


async def lie(url: str) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(LIE)
        return await asyncio.wait_for(reader.read(), 120)
    finally:
        writer.close()


async def poison_traffic(url: str, until: asyncio.Event, tally: Tally, resets: list) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        while not until.is_set():

            async def bad(path: str, body: bytes):
                tally.tried += 1
                try:
                    r = await http.post(f"{url}{path}", content=body, headers={"content-type": "application/json"})
                except httpx.TransportError:
                    # Over the body limit: refused (413) and closed before the rest was read, so the client
                    # may see the reset first. Counted apart; anything else would be lost.
                    if len(body) > MAX_BODY:
                        resets[0] += 1
                    else:
                        tally.lost += 1
                    return
                if r.status_code >= 500:
                    tally.failed += 1

            async def lied():
                tally.tried += 1
                try:
                    raw = await lie(url)
                except (OSError, asyncio.TimeoutError):
                    tally.lost += 1
                    return
                if not raw.startswith(b"HTTP/1.1 4"):
                    tally.failed += 1

            await asyncio.gather(*(bad(p, b) for p, b in POISON), lied())


def scenario_poison(kb: Path, n: int, clients: int) -> tuple[list, dict]:
    good, bad, resets = Tally(), Tally(), [0]
    with kb_serve(kb, "--max-body-bytes", str(MAX_BODY), "--body-timeout", "2") as (url, proc):

        async def run():
            done = asyncio.Event()
            poison = asyncio.create_task(poison_traffic(url, done, bad, resets))
            await good_traffic(url, n, clients, good)
            done.set()
            await poison

        start = time.perf_counter()
        asyncio.run(run())
        seconds = time.perf_counter() - start
        health = httpx.get(f"{url}/health").json()
        rss = psutil.Process(proc.pid).memory_info().rss / 2**20
    note = f"server 5xx: {health['errors_5xx']}, 4xx: {health['errors_4xx']}; RSS {rss:.0f} MB after; {seconds:.0f} s"
    return (
        [
            good.row("poison", "good searches + page reads", note),
            bad.row(
                "poison",
                "surrogates, bad URLs, deep JSON, huge bodies, non-UTF-8, Content-Length lies",
                f"failed = answered 5xx; {resets[0]} over-limit bodies saw the connection reset before their 413",
            ),
        ],
        {
            "good": vars(good),
            "bad": vars(bad),
            "resets": resets[0],
            "health": health,
            "rss_mb": rss,
            "seconds": seconds,
        },
    )


def scenario_kill(kb: Path, n: int, clients: int) -> tuple[list, dict]:
    tally = Tally()
    with kb_serve(kb) as (url_a, _), kb_serve(kb) as (url_b, victim):

        async def run():
            async with RetrievalClient([url_a, url_b], timeout=60) as client:
                gate, done = asyncio.Semaphore(clients), [0]

                async def one(i: int):
                    async with gate:
                        tally.tried += 1
                        try:
                            hits = await client.retrieve([QUESTIONS[i % len(QUESTIONS)]], topk=3)
                        except Exception:  # noqa: BLE001 - counted: a request the client could not complete
                            tally.lost += 1
                            return
                    if len(hits[0]) != 3:
                        tally.lost += 1
                    done[0] += 1
                    if done[0] == n // 4:
                        os.kill(victim.pid, signal.SIGKILL)

                await asyncio.gather(*(one(i) for i in range(n)))
                return client.stats()

        stats = asyncio.run(run())
        victim.wait(timeout=30)
    tally.failed = sum(stats["errors"].values())
    note = (
        f"one of two replicas killed (SIGKILL) after {n // 4} answers; failed = attempts that met the dead "
        f"replica, each retried on the live one ({stats.get('failovers', 0)} failovers)"
    )
    return [tally.row("replica kill -9", "searches through RetrievalClient", note)], {
        "tally": vars(tally),
        "client": stats,
    }


async def loris(url: str, kind: str) -> bool:
    """A slow client; True when the server closed the connection."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    if kind != "silent":
        writer.write(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n")

    async def drip():
        while kind == "drip":
            await asyncio.sleep(0.2)
            writer.write(b"X")
            await writer.drain()

    dripping = asyncio.create_task(drip())
    try:
        await asyncio.wait_for(reader.read(), 60)
        return True
    except (asyncio.TimeoutError, OSError):
        return False
    finally:
        dripping.cancel()
        writer.close()


def scenario_loris(kb: Path, n: int, clients: int, slow: int) -> tuple[list, dict]:
    tally, slow_tally = Tally(), Tally()
    with kb_serve(kb, "--header-timeout", "5") as (url, _):

        async def run():
            slow_ones = [asyncio.create_task(loris(url, ("silent", "partial", "drip")[i % 3])) for i in range(slow)]
            await asyncio.sleep(0.5)  # the slow connections are open before the good traffic starts
            await good_traffic(url, n, clients, tally)
            return await asyncio.gather(*slow_ones)

        closed = asyncio.run(run())
    slow_tally.tried = slow
    slow_tally.failed = closed.count(False)
    return (
        [
            tally.row("slow-loris", "good searches + page reads", f"while {slow} slow connections were open"),
            slow_tally.row(
                "slow-loris",
                "slow connections (silent, half headers, 1 byte / 0.2 s)",
                "failed = not closed by the server within 60 s (header timeout 5 s)",
            ),
        ],
        {"good": vars(tally), "slow": vars(slow_tally)},
    )


SCENARIOS = ("poison", "replica_kill", "slow_loris", "train_outage")
RESULTS = ROOT / "benchmarks" / "results" / "faults.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000, help="good requests per scenario")
    ap.add_argument("--clients", type=int, default=32, help="good requests in flight")
    ap.add_argument("--slow", type=int, default=300, help="slow-loris connections")
    ap.add_argument("--train-prompts", type=int, default=8, help="prompts of the training run (n=2 each)")
    ap.add_argument("--outage-s", type=float, default=15.0, help="seconds the KB stays down in the training run")
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    args = ap.parse_args()
    kb = ensure_sample_kb(Path("runs/sample-kb"))
    runs = {
        "poison": lambda: scenario_poison(kb, args.requests, args.clients),
        "replica_kill": lambda: scenario_kill(kb, args.requests, args.clients),
        "slow_loris": lambda: scenario_loris(kb, args.requests, args.clients, args.slow),
        "train_outage": lambda: train_outage.run(
            kb, ROOT / "runs" / "bench-train-outage", args.train_prompts, args.outage_s
        ),
    }
    earlier = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    payload, rows = {"args": vars(args), "measured": {}}, []
    for name in SCENARIOS:
        if name in args.scenarios:
            got, payload[name] = runs[name]()
            payload["measured"][name] = date.today().isoformat()
            print(json.dumps({name: payload[name]}, default=str))
        elif name in earlier.get("rows", {}):
            got, payload[name] = earlier["rows"][name], earlier.get(name)
            payload["measured"][name] = earlier.get("measured", {}).get(name, "an earlier run")
        else:
            continue
        payload.setdefault("rows", {})[name] = got
        rows += got
    when = "; ".join(f"{name} {day}" for name, day in payload["measured"].items())
    # the KB scenarios' traffic as the run that measured them sent it
    kb_run = args if set(args.scenarios) & {"poison", "replica_kill", "slow_loris"} else None
    requests = kb_run.requests if kb_run else earlier.get("args", {}).get("requests", args.requests)
    clients = kb_run.clients if kb_run else earlier.get("args", {}).get("clients", args.clients)
    payload["kb_traffic"] = {"requests": requests, "clients": clients}
    note = (
        f"{requests} good requests per KB scenario ({clients} in flight; 1 in 8 a page read), sample KB "
        "(4366 passages, hybrid retriever), every server a real `asearcher kb serve` process on loopback. The "
        "training run: OpenRLHF's own train() on CPU with the streaming scheduler, the scripted workload (1-8 "
        f"turns of 1 s, real searches, BM25), KB down {args.outage_s:g} s. Measured: {when}"
    )
    print(publish("faults", ["scenario", "traffic", "tried", "failed", "lost", "notes"], rows, note, payload))


if __name__ == "__main__":
    main()
