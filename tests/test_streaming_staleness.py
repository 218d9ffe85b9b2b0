"""The equal-staleness table's choices and arithmetic (benchmarks/streaming_staleness.py); its runs are the real
chain's, measured by benchmarks/trained_staleness.py (tests/test_trained_staleness.py)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.streaming_staleness import openrlhf_candidates, rows


def sweep(**configs: tuple[float, int]) -> dict:
    """A saved sweep of one workload: name -> (simulated seconds, simulated staleness)."""
    sim = {name.replace("_", " "): {"seconds": s, "staleness_max": m} for name, (s, m) in configs.items()}
    sim["streaming"] = {"seconds": 1.0, "staleness_max": 0}  # never a candidate, however fast
    return {"sims": {"32 turns / capacity": sim}}


def test_candidates_are_the_faster_ones_at_most_one_version_staler_then_the_fastest_within():
    s = sweep(
        OpenRLHF_a=(100.0, 11),  # fastest, far over
        OpenRLHF_b=(150.0, 5),  # one over: probed
        OpenRLHF_c=(140.0, 5),  # one over and faster than b: probed first
        OpenRLHF_d=(200.0, 4),  # the fastest within 4
        OpenRLHF_e=(300.0, 2),  # within, slower
        OpenRLHF_f=(180.0, 6),  # two over: not probed
    )
    assert openrlhf_candidates(s, "32 turns", 4) == ["OpenRLHF c", "OpenRLHF b", "OpenRLHF d"]
    assert openrlhf_candidates(s, "32 turns", 2) == ["OpenRLHF e"]


def run(span: float, tokens: int, staleness: int) -> dict:
    return {"span_s": span, "trained_staleness": {"max": staleness, "tokens": tokens}}


def test_a_row_compares_trained_tokens_per_second_at_the_largest_staleness_measured():
    results = {
        "32 turns / 4": {
            "streaming, eta 4, restart": [run(200, 8000, 4), run(210, 9000, 3), run(190, 7000, 4)],
            "OpenRLHF queue 2, generate 8, partial on": [run(300, 9000, 3), run(330, 9900, 5), run(360, 9000, 3)],
        },
        "128 turns / 4": {"streaming, eta 4, restart": [run(100, 1000, 2)]},
    }
    first, second = rows(results)
    # medians of tokens/s: streaming 40 (40, 42.9, 36.8), OpenRLHF 30 (30, 30, 25): 1.33x; the largest staleness
    # of the six runs is 5, whatever the settings were
    assert first == [
        "32 turns",
        "<= 5",
        "streaming, eta 4, restart",
        "200 (190-210)",
        "OpenRLHF queue 2, generate 8, partial on",
        "330 (300-360)",
        "1.33x",
        "3 + 3",
    ]
    assert second == ["128 turns", "<= 2", "streaming, eta 4, restart", "100 (100-100)", "–", "–", "–", "1 + 0"]


def test_runs_saved_with_the_table_come_back_into_an_empty_folder_and_only_under_their_key(tmp_path, monkeypatch):
    import json

    from benchmarks import streaming_staleness as ss
    from benchmarks.run_key import code_key, keep_result, kept_result

    made = tmp_path / "made"
    for i in (0, 1):
        (made / "32_turns" / "eta4" / str(i) / "streaming").mkdir(parents=True)
    key = code_key({"prompts": 48}, ss.RUN_CODE, tuple(ss.RUN_NEUTRAL))
    keep_result(made / "32_turns" / "eta4" / "0" / "streaming" / "result.json", key, {"span_s": 208.0})
    stale = {**key, "code": "an older tree"}
    keep_result(made / "32_turns" / "eta4" / "1" / "streaming" / "result.json", stale, {"span_s": 1.0})
    kept = ss.kept_runs(made)
    assert list(kept) == ["32_turns/eta4/0/streaming/result.json"]  # another code's run is not saved

    saved = tmp_path / "saved.json"
    absolute = tmp_path / "absolute.json"  # inside tmp_path, so a broken guard writes nothing elsewhere
    hostile = {"../outside.json": kept["32_turns/eta4/0/streaming/result.json"], str(absolute): {}}
    saved.write_text(json.dumps({"kept": {**kept, **hostile}}))
    monkeypatch.setattr(ss, "SAVED", saved)
    fresh = tmp_path / "fresh"
    assert ss.restore(fresh) == 1 and ss.restore(fresh) == 0  # written once, then present
    assert not (tmp_path / "outside.json").exists() and not absolute.exists()
    back = fresh / "32_turns" / "eta4" / "0" / "streaming" / "result.json"
    assert kept_result(back, key) == {"span_s": 208.0}
    assert kept_result(back, {**key, "args": {"prompts": 12}}) is None  # other arguments: run again


def throwaway_repo(tmp_path: Path, monkeypatch, files: dict[str, str]):
    """A git repository at `tmp_path` holding `files` under pkg/, committed once, made run_key's ROOT; returns
    git(*args) -> its output."""
    import subprocess

    from benchmarks import run_key

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    (tmp_path / "pkg").mkdir()
    for name, text in files.items():
        (tmp_path / "pkg" / name).write_text(text)
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    monkeypatch.setattr(run_key, "ROOT", tmp_path)
    return git


def code_key_of(paths: tuple[str, ...], *neutral: str) -> str:
    """run_key's code key of `paths` as a new invocation computes it (its per-process cache cleared)."""
    from benchmarks import run_key

    run_key._code.cache_clear()
    return run_key.code_key({}, paths, neutral)["code"]


def test_the_code_key_ignores_only_the_paths_left_out(tmp_path, monkeypatch):
    from benchmarks import run_key

    git = throwaway_repo(tmp_path, monkeypatch, {"run.py": "x = 1\n", "web.py": "x = 1\n"})

    def code() -> str:
        return code_key_of(("pkg", "!pkg/web.py"))

    first = code()
    (tmp_path / "pkg" / "web.py").write_text("x = 2\n")
    assert code() == first  # uncommitted, but left out
    git("commit", "-qam", "web")
    assert code() == first
    (tmp_path / "pkg" / "run.py").write_text("x = 2\n")
    assert code().startswith("uncommitted")
    git("commit", "-qam", "run")
    assert code() not in (first, "") and not code().startswith("uncommitted")
    run_key._code.cache_clear()


def test_a_commit_declared_neutral_keeps_the_key_until_its_files_change_again(tmp_path, monkeypatch):
    from benchmarks import run_key

    git = throwaway_repo(tmp_path, monkeypatch, {"server.py": "x = 1\n", "run.py": "y = 1\n"})

    def code(*neutral: str) -> str:
        return code_key_of(("pkg",), *neutral)

    before = code()
    (tmp_path / "pkg" / "server.py").write_text("x = 1  # a path the runs never take\n")
    (tmp_path / "pkg" / "new.py").write_text("z = 1\n")
    git("add", ".")
    git("commit", "-qm", "neutral")
    neutral = git("rev-parse", "HEAD")
    assert code() != before  # not declared: the runs are made again
    assert code(neutral) == before  # declared: the runs made before it still count
    (tmp_path / "pkg" / "run.py").write_text("y = 2\n")
    git("commit", "-qam", "a real change")
    assert code(neutral) != before
    git("revert", "--no-edit", "HEAD")
    (tmp_path / "pkg" / "server.py").write_text("x = 3\n")  # the neutral commit's file changed again
    git("commit", "-qam", "server again")
    assert code(neutral) != before
    run_key._code.cache_clear()
    # a declared move: the file leaves its path and comes back elsewhere, its imports edited
    before_move = code(neutral)
    git("mv", "pkg/run.py", "pkg/moved.py")
    (tmp_path / "pkg" / "moved.py").write_text("y = 1  # imported from its new place\n")
    git("add", ".")
    git("commit", "-qm", "move")
    moved = git("rev-parse", "HEAD")
    assert code(neutral) != before_move
    assert code(neutral, moved) == before_move
    (tmp_path / "pkg" / "run.py").write_text("y = 2\n")  # a new file at the old path, beside the moved one
    git("add", ".")
    git("commit", "-qm", "the old path back")
    assert code(neutral, moved) != before_move
    run_key._code.cache_clear()


def test_two_neutral_commits_on_one_file_take_it_back_to_before_both(tmp_path, monkeypatch):
    from benchmarks import run_key

    git = throwaway_repo(tmp_path, monkeypatch, {"launch.py": "x = 1\n"})

    def code(*neutral: str) -> str:
        return code_key_of(("pkg",), *neutral)

    before = code()
    commits = []
    for text in ("x = 1  # moved\n", "x = 1  # moved again\n"):
        (tmp_path / "pkg" / "launch.py").write_text(text)
        git("commit", "-qam", "neutral")
        commits.append(git("rev-parse", "HEAD"))
    assert code(*commits) == before  # declared oldest first, as the list is written
    assert code(*reversed(commits)) == before
    assert code(commits[1]) != before  # only the later one: the earlier change counts
    run_key._code.cache_clear()
