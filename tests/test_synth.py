"""The synthesis pipeline end to end: a scripted OpenAI-compatible server and the real sample KB."""

from __future__ import annotations

import json

import httpx
import pytest

from data_synth.chat import BadOutput, extract_json, require_fields
from data_synth.config import SynthConfigError, load_synth_config
from data_synth.dedup import NearDuplicates
from data_synth.output import read_jsonl
from data_synth.run import run_synth
from data_synth.scripted_chat import ScriptedChat
from data_synth.sources import SeedError, kb_page_seeds, load_seeds
from local_retriever.sample import load_sample_questions
from tests.helpers import serve_app

QUESTIONS = {q["id"]: q for q in load_sample_questions()}


def _seeds(ids):
    return [
        {
            "id": i,
            "question": QUESTIONS[i]["question"],
            "answer": QUESTIONS[i]["golden_answers"][0],
            "aliases": QUESTIONS[i]["golden_answers"][1:],
        }
        for i in ids
    ]


def _config(llm_url, kb_url, **overrides):
    base = {
        "generator.base_urls": [llm_url],
        "judge.base_urls": [llm_url],
        "tools.local.urls": [kb_url],
        "k": 4,
        "rounds": 4,
        "concurrency": 4,
        "output_retries": 1,
    }
    return load_synth_config(None, {**base, **overrides})


def _fake(seeds, **kw):
    return ScriptedChat(gold={s["question"]: s["answer"] for s in seeds}, **kw)


def test_seeds_become_harder_grounded_training_rows(kb_server, tmp_path):
    seeds = _seeds(["sample_0001", "sample_0002", "sample_0003"])
    fake = _fake(seeds)
    with serve_app(fake.app) as url:
        stats = run_synth(seeds, _config(url + "/v1", kb_server), tmp_path, progress=False)
    rows = read_jsonl(tmp_path / "train.jsonl")
    assert stats["emitted"] == len(rows) == 3
    for row in rows:
        prov = row["provenance"]
        assert row["answer"] == row["golden_answers"][0] and row["question"].count("(clue") == 2
        assert prov["injections"] == 2 and prov["solve_rate"] == 0.0 and prov["k"] == 4
        assert [e["round"] for e in prov["evidence"]] == [1, 2]
        # the first fact came from a search passage, the second from the top hit's page, read with access
        assert [e["source"] for e in prov["evidence"]] == ["search", "page"]
        for e in prov["evidence"]:
            # every added fact is quoted verbatim from a KB page that /access still returns by its URL
            assert e["url"] and e["title"] and e["query"] and e["entity"] and e["fact"]
            page = httpx.post(f"{kb_server}/access", json={"urls": [e["url"]]}).json()["result"][0]
            assert page and " ".join(e["quote"].split()) in " ".join(page["contents"].split())
    items = read_jsonl(tmp_path / "items.jsonl")
    assert {i["seed_id"] for i in items} == {"sample_0001", "sample_0002", "sample_0003"}
    rounds = items[0]["rounds"]
    assert [r["action"] for r in rounds] == ["seed", "inject", "inject"]
    assert rounds[0]["verdicts"]["difficulty"]["solve_rate"] == 1.0
    assert rounds[1]["verdicts"]["difficulty"]["solve_rate"] == 0.5  # accepted as a stepping stone, not emitted
    assert stats["stages"]["inject"] == {
        "attempted": 6,
        "generated": 6,
        "quality passed": 6,
        "unique": 6,
        "accepted": 6,
        "hard enough": 3,
    }
    assert stats["per_emitted"] == {"injections": 2.0, "fuzzes": 0.0, "solve_rate": 0.0}
    tokens = stats["tokens"]
    assert tokens["by_stage"]["generator/inject"]["calls"] == 12 and tokens["total"]["prompt_tokens"] > 0
    assert tokens["per_emitted"] > 0 and tokens["total"]["estimated"] == 0
    report = (tmp_path / "report.md").read_text()
    assert "| inject | 6 | 6 | 6 | 6 | 6 | 3 |" in report
    assert json.loads((tmp_path / "stats.json").read_text())["emitted"] == 3


def test_training_file_loads_with_the_arrow_json_reader(kb_server, tmp_path):
    """OpenRLHF reads JSONL through `datasets`, i.e. pyarrow's JSON reader: the schema must be uniform."""
    import pyarrow.json as pj

    seeds = _seeds(["sample_0001", "sample_0005"])
    with serve_app(_fake(seeds).app) as url:
        run_synth(seeds, _config(url + "/v1", kb_server, actions=["inject", "fuzz"]), tmp_path, progress=False)
    table = pj.read_json(tmp_path / "train.jsonl")
    assert table.num_rows == 2 and {"question", "answer", "golden_answers", "provenance"} <= set(table.column_names)
    prov = table.column("provenance").to_pylist()
    assert all(p["fuzzes"] == 1 and p["injections"] == 1 for p in prov)
    assert all(p["edits"][0]["fuzzed"] and p["edits"][0]["into"] == "a certain one" for p in prov)


def test_bad_replies_are_retried_then_dropped_with_reason_and_the_run_goes_on(kb_server, tmp_path):
    seeds = _seeds(["sample_0001", "sample_0002"])
    seeds.append(
        {
            "id": "bad",
            "question": "Which city is the CHANGEANSWER capital of Angola?",
            "answer": "Luanda",
            "aliases": [],
        }
    )
    seeds.append({"id": "ugly", "question": "BADQUALITY capital Angola which?", "answer": "Luanda", "aliases": []})
    fake = _fake(
        seeds,
        faults={"plan_injection": ["I think the entity is Angola", '{"entity": "Angola"}'], "quality": ["HTTP 503"]},
    )
    with serve_app(fake.app) as url:
        # two generator URLs, one of them dead: calls fail over to the live one
        cfg = _config(
            url + "/v1", kb_server, concurrency=1, **{"generator.base_urls": ["http://127.0.0.1:9/v1", url + "/v1"]}
        )
        stats = run_synth(seeds, cfg, tmp_path, progress=False)
    items = {i["seed_id"]: i for i in read_jsonl(tmp_path / "items.jsonl")}
    # a malformed reply and a missing field were re-asked and the round went on; a 503 was retried
    assert items["sample_0001"]["status"] == "done"
    assert items["ugly"]["status"] == "dropped" and items["ugly"]["reason"] == "seed: quality: fluent"
    bad = items["bad"]
    assert bad["status"] == "dropped" and bad["reason"] == "never hard enough"
    assert [r["reason"] for r in bad["rounds"][1:]] == ["inject: answer changed"] * 2 + [
        "fuzz: answer changed",
        "inject: answer changed",
    ]
    assert stats["drop_reasons"]["inject: answer changed"] == 3 and stats["drop_reasons"]["fuzz: answer changed"] == 1
    assert stats["seeds"] == {"finished": 4, "done": 2, "dropped": 2}
    assert stats["emitted"] == 2


def test_ambiguous_questions_are_rejected(kb_server, tmp_path):
    seeds = [
        {"id": "amb", "question": "Which AMBIGUOUS city is the capital of Angola?", "answer": "Luanda", "aliases": []}
    ]
    with serve_app(_fake(seeds).app) as url:
        stats = run_synth(seeds, _config(url + "/v1", kb_server), tmp_path, progress=False)
    item = read_jsonl(tmp_path / "items.jsonl")[0]
    first = item["rounds"][1]
    assert first["status"] == "rejected" and first["reason"] == "uniqueness: another answer also fits"
    assert first["verdicts"]["uniqueness"]["also_valid"][0]["answer"] == "Berlin"
    assert stats["emitted"] == 0 and stats["stages"]["inject"]["unique"] == 0


def test_resume_skips_finished_seeds_and_retries_failed_ones(kb_server, tmp_path):
    seeds = _seeds(["sample_0001", "sample_0002", "sample_0003", "sample_0004"])
    with serve_app(_fake(seeds).app) as url:
        run_synth(seeds[:2], _config(url + "/v1", kb_server), tmp_path, progress=False)
    # a crash after the training rows of an item but before its items.jsonl line
    orphan = dict(read_jsonl(tmp_path / "train.jsonl")[0], id="sample_0003#r2")
    orphan["provenance"] = {**orphan["provenance"], "seed_id": "sample_0003"}
    with open(tmp_path / "train.jsonl", "a") as fh:
        fh.write(json.dumps(orphan) + "\n")
    # seed 4 fails: no endpoint answers
    run_synth(
        seeds[3:],
        _config("http://127.0.0.1:9/v1", kb_server, **{"generator.retries": 0, "judge.retries": 0}),
        tmp_path,
        progress=False,
    )
    assert read_jsonl(tmp_path / "items.jsonl")[-1]["status"] == "failed"
    fake = _fake(seeds)
    with serve_app(fake.app) as url:
        stats = run_synth(seeds, _config(url + "/v1", kb_server), tmp_path, progress=False)
    assert fake.calls["quality"] == 2 * 3  # seeds 3 and 4 only: seed validation and two injections each
    ids = [r["id"] for r in read_jsonl(tmp_path / "train.jsonl")]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == stats["emitted"] == 4
    assert stats["seeds"] == {"finished": 4, "done": 4}


def test_a_kb_outage_fails_the_item_for_a_retry_instead_of_dropping_its_candidates(kb_server, tmp_path):
    seeds = _seeds(["sample_0001"])
    dead_kb = {"tools.local.retries": 0, "tools.local.check_on_start": False}
    with serve_app(_fake(seeds).app) as url:
        run_synth(seeds, _config(url + "/v1", "http://127.0.0.1:9", **dead_kb), tmp_path, progress=False)
        (item,) = read_jsonl(tmp_path / "items.jsonl")
        assert item["status"] == "failed" and item["reason"].startswith("ToolUnavailable"), item
        stats = run_synth(seeds, _config(url + "/v1", kb_server), tmp_path, progress=False)
    assert stats["seeds"] == {"finished": 1, "done": 1}


def test_near_duplicate_seeds_and_questions_are_dropped(kb_server, tmp_path):
    seeds = _seeds(["sample_0001"])
    seeds.append(
        {
            "id": "dup",
            "question": "What is the capital and the largest city of Angola?",
            "answer": "Luanda",
            "aliases": [],
        }
    )
    with serve_app(_fake(seeds).app) as url:
        stats = run_synth(seeds, _config(url + "/v1", kb_server), tmp_path, progress=False)
    items = {i["seed_id"]: i for i in read_jsonl(tmp_path / "items.jsonl")}
    assert items["dup"]["reason"] == "near-duplicate seed" and items["dup"]["detail"] == "sample_0001"
    assert stats["emitted"] == 1
    dedup = NearDuplicates(0.8)
    assert dedup.add("a", "When was Michael Hein, the first Ulster County Executive, born?") is None
    assert dedup.add("b", "When was Michael P. Hein, the first Ulster County Executive, born?") == "a"
    assert dedup.add("c", "Which railway did the Ulster County Executive keep running in 2016?") is None


def test_pages_from_the_kb_seed_grounded_base_questions(sample_kb, kb_server, tmp_path):
    seeds = kb_page_seeds(sample_kb, 3, seed=1)
    assert len(seeds) == 3 and all(s["id"].startswith("page:") for s in seeds)
    with serve_app(ScriptedChat().app) as url:
        stats = run_synth(seeds, _config(url + "/v1", kb_server, rounds=2), tmp_path, progress=False)
    items = read_jsonl(tmp_path / "items.jsonl")
    assert stats["stages"]["seed"]["accepted"] >= 2
    pages = {s["id"]: s["page"] for s in seeds}
    for item in items:
        assert item["source"] == "page"
        if "seed" not in item:  # the scripted model finds no year on some pages and says so in prose
            assert item["reason"] == "seed: not json"
            continue
        assert item["seed"]["answer"] in pages[item["seed_id"]]["contents"]
        assert item["seed"]["answer"] not in item["seed"]["question"]


@pytest.mark.slow
@pytest.mark.ray
def test_runs_in_shards_on_ray(kb_server, tmp_path):
    import ray

    seeds = _seeds(["sample_0001", "sample_0002", "sample_0003"])
    with serve_app(_fake(seeds).app) as url:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            stats = run_synth(
                seeds, _config(url + "/v1", kb_server), tmp_path, ray_address="local", shard_size=2, progress=False
            )
        finally:
            ray.shutdown()
    assert stats["emitted"] == 3 and stats["seeds"] == {"finished": 3, "done": 3}


def test_injection_reads_more_of_the_top_hits_page(kb_server):
    import asyncio

    from asearcher_plugin.tools import make_toolbox
    from data_synth.steps import read_page
    from data_synth.text import page_chunks

    text = "First paragraph here.\n\n" + "x" * 250 + "\nShort one.\nAnother short one."
    chunks = page_chunks(text, 100)
    assert all(len(c) <= 100 for c in chunks) and "".join(chunks).replace("\n", "") == text.replace("\n", "")

    cfg = _config("http://127.0.0.1:9/v1", kb_server, page_passages=2, evidence_chars=300)

    async def main():
        tools = make_toolbox(cfg.tools)
        try:
            hit = (await tools.search("Angola civil war", 1))[0]
            page = await tools.access(hit["url"])
            got = await read_page(tools, hit, "Angola", cfg)
            missing = await read_page(tools, {"title": "No such page at all", "url": "", "text": "nothing"}, "x", cfg)
        finally:
            await tools.aclose()
        return hit, page, got, missing

    hit, page, got, missing = asyncio.run(main())
    flat = " ".join(page.split())
    assert 1 <= len(got) <= 2 and missing == []
    for p in got:
        # pieces of the same page, not the passage search already showed
        assert p["url"] == hit["url"] and p["source"] == "page" and " ".join(p["text"].split()) in flat
        assert " ".join(hit["text"].split())[:200] not in " ".join(p["text"].split())


def test_json_replies_and_seed_files_are_checked(tmp_path):
    assert extract_json('<think>{"no": 1}</think>Here: ```json\n{"a": {"b": "}"}}\n```') == {"a": {"b": "}"}}
    with pytest.raises(BadOutput, match="not json"):
        extract_json("no object here")
    with pytest.raises(BadOutput, match="missing field: answer"):
        require_fields({"question": "q"}, {"question": str, "answer": str})
    assert require_fields({"passage": "2"}, {"passage": int}) == {"passage": 2}
    path = tmp_path / "seeds.jsonl"
    path.write_text(
        '{"question": "Q1?", "answer": "A"}\nnot json\n{"question": "Q2?"}\n'
        '{"question": "Q3?", "golden_answers": ["B", "b2"]}\n'
    )
    seeds, problems = load_seeds(path)
    assert [s["answer"] for s in seeds] == ["A", "B"] and seeds[1]["aliases"] == ["b2"]
    assert problems[0].endswith("seeds.jsonl:2: Expecting value: line 1 column 1 (char 0)")
    assert problems[1].endswith("seeds.jsonl:3: no `answer` (or `golden_answers`)")
    with pytest.raises(SeedError, match="seeds.jsonl:2"):
        load_seeds(path, strict=True)
    with pytest.raises(SynthConfigError, match="rounds: Input should be greater than or equal to 1"):
        load_synth_config(None, {"rounds": 0})
    with pytest.raises(SynthConfigError, match="generator.modle: Extra inputs are not permitted"):
        load_synth_config(None, {"generator.modle": "x"})


def test_cli_runs_from_a_seed_file_to_a_training_file(kb_server, tmp_path):
    from tests.helpers import run_cli

    help_text = run_cli("synth", "--help").stdout
    assert "--seeds seeds.jsonl" in help_text and "train.jsonl" in help_text
    seeds = _seeds(["sample_0001", "sample_0002"])
    path = tmp_path / "seeds.jsonl"
    path.write_text("".join(json.dumps({"question": s["question"], "answer": s["answer"]}) + "\n" for s in seeds))
    bad = run_cli("synth", str(tmp_path / "out"), "--seeds", str(path), "--set", "k=0")  # the deprecated positional
    assert bad.returncode == 2 and "k: Input should be greater than or equal to 1" in bad.stderr
    assert "note: the positional run folder is deprecated; use --out DIR" in bad.stderr
    with serve_app(_fake(seeds).app) as url:
        done = run_cli(
            "synth",
            "--out",
            str(tmp_path / "out"),
            "--seeds",
            str(path),
            "--generator-url",
            url + "/v1",
            "--judge-url",
            url + "/v1",
            "--kb-url",
            kb_server,
            "--k",
            "4",
            "--set",
            "output_retries=1",
        )
    assert done.returncode == 0, done.stderr
    assert "| inject | 4 | 4 | 4 | 4 | 4 | 2 |" in done.stdout
    assert json.loads(done.stdout.strip().splitlines()[-1])["emitted"] == 2
    assert len(read_jsonl(tmp_path / "out" / "train.jsonl")) == 2


def test_items_file_cut_mid_line_is_not_merged_with_the_next_item(tmp_path):
    from data_synth.config import SynthConfig
    from data_synth.output import Output
    from data_synth.records import SynthItem

    done = json.dumps({"seed_id": "s1", "status": "dropped", "variants": []})
    cut = json.dumps({"seed_id": "s2", "status": "dropped", "variants": []})
    (tmp_path / "items.jsonl").write_text(done + "\n" + cut[:20])
    out = Output(tmp_path, SynthConfig())
    assert out.finished == {"s1"}
    out.write(SynthItem(seed_id="s2", status="failed"))
    out.close()
    rows = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert [r["seed_id"] for r in rows] == ["s1", "s2"]


def test_items_lines_read_back_as_records_unchanged(tmp_path):
    """items.jsonl lines (as the dict-building version wrote them) become `SynthItem`s and back without loss."""
    from data_synth.records import SynthItem

    verdicts = {
        "quality": {"passed": True, "failed": []},
        "difficulty": {"solve_rate": 0.25, "answers": ["x"], "correct": [False]},
        "uniqueness": {"passed": True},
        "passed": True,
        "reason": "",
    }
    variant = {
        "question": "Q?",
        "answer": "A",
        "aliases": ["a"],
        "facts": ["f"],
        "evidence": [{"url": "u"}],
        "entities": [],
        "edits": [],
        "injections": 1,
        "fuzzes": 0,
        "round": 1,
        "solve_rate": 0.25,
        "duplicate_of": "s0#r1",
    }
    row = {
        "seed_id": "s1",
        "source": "page",
        "status": "done",
        "reason": "",
        "seed": {"question": "Q0?", "answer": "A"},
        "rounds": [
            {
                "round": 0,
                "action": "seed",
                "status": "accepted",
                "question": "Q0?",
                "verdicts": verdicts,
                "reason": "",
            },
            {"round": 1, "action": "inject", "status": "dropped", "reason": "inject: answer changed", "detail": "x"},
        ],
        "variants": [variant],
        "usage": {"generator/inject": {"calls": 1}},
        "seconds": 1.5,
        "emitted": 0,
    }
    item = SynthItem.from_json(row)
    assert (
        item.rounds[0].passed("quality") and item.rounds[0].solve_rate == 0.25 and not item.rounds[1].passed("quality")
    )
    assert item.variants[0].qa.golds() == ["A", "a"] and item.variants[0].duplicate_of == "s0#r1"
    assert item.to_json() == row
    assert SynthItem.from_json({"seed_id": "s2", "status": "failed"}).to_json() == {
        "seed_id": "s2",
        "source": "seed",
        "status": "failed",
        "reason": "",
        "rounds": [],
        "variants": [],
        "usage": {},
        "seconds": 0.0,
    }
