"""The typed records: OpenRLHF's dict built in one place, eval metrics from `scores` only, old rows still read."""

import asyncio
import json

from asearcher_plugin.engines.types import SamplingParams
from asearcher_plugin.env import AgentExecutor
from asearcher_plugin.eval.runner import run_eval, write_reports
from asearcher_plugin.records import EvalRow, Trajectory
from asearcher_plugin.settings.config import AgentConfig, JudgeConfig
from tests.helpers import ScriptedEngine, free_port

ANSWER = [("<think>Orwell wrote it.</think> <answer>George Orwell</answer>", "stop")]


def judged_config() -> AgentConfig:
    """The judge metric with no judge listening: every verdict falls back to F1 and counts judge_failed."""
    config = AgentConfig(agent_type="search-r1", max_turns=2, max_new_tokens_per_turn=64)
    config.reward.metric = "judge"
    config.reward.judge = JudgeConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", retries=0, timeout=5)
    return config


def test_execute_returns_the_records_openrlhf_dict(tokenizer):
    params = SamplingParams(temperature=1.0, max_tokens=None, logprobs=1)
    executor = AgentExecutor(judged_config())

    async def both():
        record = await executor.run(
            "Who wrote Animal Farm?", '["George Orwell"]', params, 1024, tokenizer, ScriptedEngine(tokenizer, ANSWER)
        )
        as_dict = await executor.execute(
            "Who wrote Animal Farm?", '["George Orwell"]', params, 1024, tokenizer, ScriptedEngine(tokenizer, ANSWER)
        )
        return record, as_dict

    record, as_dict = asyncio.run(both())
    assert isinstance(record, Trajectory)
    assert record.scores == dict.fromkeys(["em", "f1", "asearcher_f1", "cover_em", "substring", "judge"], 1.0)
    assert record.stats["judge_failed"] == 1.0 and "judge_failed" not in record.scores
    assert not any(k.startswith("score_") for k in record.stats)
    expected = record.to_openrlhf()
    expected["extra_logs"]["tool_seconds"] = as_dict["extra_logs"]["tool_seconds"]
    assert as_dict.keys() == expected.keys()
    clocks = ("token_times", "turn_times")  # wall clock: differs between the two runs
    assert {k: v for k, v in as_dict.items() if k not in clocks} == {
        k: v for k, v in expected.items() if k not in clocks
    }
    assert len(as_dict["turn_times"]) == len(as_dict["action_ranges"])
    logs = as_dict["extra_logs"]  # what OpenRLHF logs: flat numbers, metric scores prefixed, counters as they were
    assert all(isinstance(v, float) for v in logs.values())
    assert list(logs)[-3:] == ["score_judge", "judge_failed", "truncated"]
    assert as_dict["scores"] == as_dict["reward"] == 1.0


def test_a_counter_never_appears_as_a_metric(tmp_path, tokenizer):
    """judge_failed is logged per trajectory, but metrics.json and the summary hold metrics alone."""
    items = [
        {"dataset": "sample", "id": f"q{i}", "question": "Who wrote Animal Farm?", "golden_answers": ["George Orwell"]}
        for i in range(2)
    ]
    out = tmp_path / "eval"
    engine = ScriptedEngine(tokenizer, ANSWER)
    asyncio.run(run_eval(items, judged_config(), engine, tokenizer, out, k=2, max_length=1024, progress=False))
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["status"] == "ok" and r["logs"]["judge_failed"] == 1.0 for r in rows)
    assert all(set(r["scores"]) == {"em", "f1", "asearcher_f1", "cover_em", "substring", "judge"} for r in rows)
    metrics = json.loads((out / "metrics.json").read_text())
    for name, entry in metrics["datasets"].items():
        assert set(entry) == {"em", "f1", "asearcher_f1", "cover_em", "substring", "judge", "distributions"}, name
        assert entry["judge"]["avg@2"] == 1.0
    summary = (out / "summary.md").read_text()
    assert "| sample | judge |" in summary and "judge_failed" not in summary
    assert "judge_failed" not in (out / "report.html").read_text()


def test_rows_of_the_previous_format_still_resume_and_report(tmp_path):
    """Before `logs` and `scores` were kept apart, `logs` held the flat extra_logs; some rows had no `scores`."""
    flat = {
        "turns": 1.0,
        "searches": 0.0,
        "accesses": 0.0,
        "invalid_actions": 0.0,
        "tool_errors": 0.0,
        "score_em": 1.0,
        "score_f1": 1.0,
        "score_judge": 1.0,
        "judge_failed": 1.0,
        "truncated": 0.0,
    }
    base = {
        "dataset": "sample",
        "question": "Who wrote Animal Farm?",
        "golden_answers": ["George Orwell"],
        "status": "ok",
        "answer": "George Orwell",
        "reward": 1.0,
        "text": "",
        "truncated": False,
        "tokens": 10,
    }
    old = [
        {**base, "id": "q0", "seed": 0, "logs": flat, "scores": {"em": 1.0, "f1": 1.0, "judge": 1.0}},
        {**base, "id": "q1", "seed": 0, "logs": flat},
        {
            "id": "q2",
            "dataset": "sample",
            "seed": 0,
            "question": "x",
            "golden_answers": ["y"],
            "status": "failed",
            "error": "EngineUnavailable: down",
            "seconds": 0.1,
        },
    ]
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    rows = {r["id"]: EvalRow.from_json(r) for r in old}
    assert rows["q1"].scores == rows["q0"].scores == {"em": 1.0, "f1": 1.0, "judge": 1.0}
    assert rows["q1"].logs == {k: v for k, v in flat.items() if not k.startswith("score_")}
    assert rows["q2"].to_json() == old[2]
    metrics = write_reports(tmp_path, k=1)
    assert metrics["items_ok"] == 2 and metrics["items_failed"] == 1
    assert set(metrics["datasets"]["sample"]) == {"em", "f1", "judge", "distributions"}
