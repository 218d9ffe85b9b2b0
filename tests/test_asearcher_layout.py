"""Drop-in for ASearcher users: its eval data layout and aggregate file, its KB files, its server discovery."""

import json
import subprocess
import sys

import pytest

from asearcher_plugin.eval.datasets import DatasetError, asearcher_layout, load_datasets
from tests.helpers import ScriptedModel, free_port, run_eval, write_jsonl

# ASearcher's test rows: `question` and `answer` (a string or a list), or `gt`; no ids.
GAIA = [
    {"question": "Which city is the capital of Angola?", "answer": "Luanda", "level": 1},
    {"question": "Which ocean lies west of Angola?", "gt": ["Atlantic"]},
]
FRAMES = [
    {"question": "Who wrote An American in Paris?", "answer": ["Gershwin"]},
    {"question": "Which prize did Einstein get in 1921?", "answer": ["Nobel", "Nobel Prize"]},
    {"question": "In which year did Einstein die?", "answer": 1955},
]


@pytest.fixture
def model_server(tiny_model):
    from transformers import AutoTokenizer

    from tests.helpers import serve_app

    answers = dict(
        zip([r["question"] for r in GAIA + FRAMES], ["Luanda", "Atlantic", "Gershwin", "Nobel", "1954"])
    )  # one wrong, so the means are not all ones
    model = ScriptedModel(AutoTokenizer.from_pretrained(tiny_model), answers)
    with serve_app(model.app) as url:
        model.url = url
        yield model


def test_layout_reads_jsonl_then_json_array_named_by_folder(tmp_path):
    write_jsonl(tmp_path / "GAIA" / "test.jsonl", GAIA)
    (tmp_path / "Frames").mkdir()
    (tmp_path / "Frames" / "test.json").write_text(json.dumps(FRAMES, indent=2))
    items = load_datasets([], named=asearcher_layout(tmp_path, "GAIA, Frames,"))
    assert [(r["dataset"], r["id"], r["golden_answers"]) for r in items] == [
        ("GAIA", "0", ["Luanda"]),
        ("GAIA", "1", ["Atlantic"]),
        ("Frames", "0", ["Gershwin"]),
        ("Frames", "1", ["Nobel", "Nobel Prize"]),
        ("Frames", "2", ["1955"]),
    ]
    # --split picks another file name in every folder.
    write_jsonl(tmp_path / "GAIA" / "dev.jsonl", GAIA[:1])
    assert len(load_datasets([], named=asearcher_layout(tmp_path, "GAIA", split="dev"))) == 1


def test_layout_errors_name_what_is_missing(tmp_path):
    write_jsonl(tmp_path / "GAIA" / "test.jsonl", GAIA)
    with pytest.raises(DatasetError, match=r"'Frames': neither .*Frames/test.jsonl nor .*Frames/test.json exists"):
        asearcher_layout(tmp_path, "GAIA,Frames")
    with pytest.raises(DatasetError, match="is not a folder"):
        asearcher_layout(tmp_path / "nowhere", "GAIA")
    with pytest.raises(DatasetError, match="names no dataset"):
        asearcher_layout(tmp_path, " , ")
    with pytest.raises(DatasetError, match="both be named 'GAIA'"):
        load_datasets([], named=asearcher_layout(tmp_path, "GAIA,GAIA"))
    (tmp_path / "Bad").mkdir()
    (tmp_path / "Bad" / "test.json").write_text('[{"question": "q?", "answer": "a"},\n {"question": ]')
    with pytest.raises(DatasetError, match=r"Bad/test.json:2: invalid JSON"):
        load_datasets([], named=asearcher_layout(tmp_path, "Bad"))
    (tmp_path / "NoAnswer").mkdir()
    rows = [{"question": "q?", "answer": "a"}, {"question": "r?"}]
    (tmp_path / "NoAnswer" / "test.json").write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"NoAnswer/test.json:2: no answer field"):
        load_datasets([], named=asearcher_layout(tmp_path, "NoAnswer"))


def run_cli_eval(tmp_path, model, out, *args, k=2):
    return run_eval(tmp_path, model, out, k=k, extra=[*args, "--temperature", "0.6"])


def test_eval_in_asearcher_layout_counts_each_dataset_and_writes_its_aggregate(tmp_path, model_server):
    data = tmp_path / "data"
    write_jsonl(data / "GAIA" / "test.jsonl", GAIA)
    write_jsonl(data / "Frames" / "test.jsonl", FRAMES)
    out = tmp_path / "eval"
    done = run_cli_eval(tmp_path, model_server, out, "--data_dir", str(data), "--data_names", "GAIA,Frames")
    assert done.returncode == 0, done.stderr[-2000:]

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["items_ok"] == 10 and metrics["items_failed"] == 0 and metrics["items_error"] == 0
    assert metrics["datasets"]["GAIA"]["em"]["questions"] == 2
    assert metrics["datasets"]["Frames"]["em"]["questions"] == 3
    assert metrics["datasets"]["GAIA"]["em"]["avg@2"] == 1.0
    assert metrics["datasets"]["Frames"]["em"]["avg@2"] == pytest.approx(2 / 3)
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted((r["dataset"], r["id"], r["seed"]) for r in rows) == sorted(
        [("GAIA", str(i), s) for i in range(2) for s in (0, 1)]
        + [("Frames", str(i), s) for i in range(3) for s in (0, 1)]
    )

    # ASearcher's per-run aggregate, beside metrics.json, keyed by dataset.
    agg = json.loads((out / "aggregate_results_search-r1_search-r1_async-search-access_t0.6.json").read_text())
    assert list(agg) == ["GAIA", "Frames"]
    assert agg["GAIA"]["num"] == 2 and agg["Frames"]["num"] == 3
    assert agg["GAIA"]["EM"] == 1.0 and agg["GAIA"]["EM.Max@2"] == 1.0
    assert agg["Frames"]["EM"] == pytest.approx(2 / 3) and agg["Frames"]["CEM.Max@2"] == pytest.approx(2 / 3)
    assert agg["Frames"]["F1"] == pytest.approx(2 / 3)
    assert agg["Frames"]["avg_num_searchs"] == 0.0 and agg["Frames"]["avg_num_access"] == 0.0
    assert agg["Frames"]["avg_gen_len"] > 0
    assert "MBE" not in agg["Frames"]  # no judge configured


def test_eval_refuses_half_the_layout_flags(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "asearcher_plugin.cli",
            "eval",
            "--data-dir",
            str(tmp_path),
            "--base-url",
            "http://127.0.0.1:1/v1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--data-dir and --data-names go together" in done.stderr


# ASearcher's local KB files: `wiki_corpus.jsonl` rows are wiki-18's `{"id", "contents"}` with a quoted
# title line; `wiki_webpages.jsonl` rows are `{"url", "contents", ...}` keyed by an index.php URL.
CORPUS = [
    {"id": "0", "contents": '"Beveridge, Victoria"\nBeveridge is a town in Victoria, Australia, north of Melbourne.'},
    {"id": "1", "contents": '"Beveridge, Victoria"\nNed Kelly grew up in Beveridge.'},
    {"id": "2", "contents": '"Ned Kelly"\nNed Kelly was an Australian bushranger who wore home-made armour.'},
    {"id": "3", "contents": '"Kwanza River"\nThe Kwanza is a river in Angola that flows into the Atlantic.'},
]
WEBPAGES = [
    # page text only, no title line
    {
        "url": "https://en.wikipedia.org/w/index.php?title=Beveridge,%20Victoria",
        "contents": "Beveridge is a town in Victoria, Australia.\nIt lies north of Melbourne.\n"
        "Ned Kelly grew up there.",
    },
    # a title line first, then text, and a field of its own
    {
        "url": "https://en.wikipedia.org/w/index.php?title=Ned%20Kelly",
        "id": "wp-2",
        "contents": "Ned Kelly\nNed Kelly was an Australian bushranger.\n\nHe was executed in 1880.",
    },
    # a first line that only looks like a title
    {
        "url": "https://en.wikipedia.org/w/index.php?title=Kwanza%20River",
        "contents": "Kwanza\nThe Kwanza is a river in Angola.",
    },
]


def nonblank(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _wait_for(path, proc, what):  # no deadline of its own: the test timeout bounds it
    import time

    while not path.is_file():
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with code {proc.returncode}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.1)


def test_e5_preset_settings_and_a_local_model_folder(tmp_path):
    import numpy as np

    from local_retriever.encoder import Encoder, EncoderConfig, default_encoder_path

    cfg = EncoderConfig.from_options("e5-base-v2")
    assert (cfg.model, cfg.pooling, cfg.query_prefix, cfg.passage_prefix) == (
        "intfloat/e5-base-v2",
        "mean",
        "query: ",
        "passage: ",
    )
    assert EncoderConfig.from_options("e5-base-v2", query_prefix="").query_prefix == ""  # explicit options win
    assert EncoderConfig.from_options("all-MiniLM-L6-v2").query_prefix == ""
    # ASearcher's scripts point at a local folder named after the model.
    local = tmp_path / "intfloat__e5-base-v2"
    local.symlink_to(default_encoder_path(), target_is_directory=True)
    cfg = EncoderConfig.from_options(str(local))
    assert (cfg.model, cfg.pooling, cfg.query_prefix, cfg.passage_prefix) == (
        str(local),
        "mean",
        "query: ",
        "passage: ",
    )
    assert EncoderConfig.from_options("/models/anything", "e5").passage_prefix == "passage: "
    with pytest.raises(ValueError, match="unknown encoder preset 'e6'"):
        EncoderConfig.from_options(str(local), "e6")
    # The prefixes reach the model: a preset query equals the prefixed text without one.
    with_preset = Encoder(cfg, device="cpu")
    plain = Encoder(EncoderConfig(model=str(local), pooling="mean"), device="cpu")
    np.testing.assert_allclose(
        with_preset.encode(["Ned Kelly"], "query"), plain.encode(["query: Ned Kelly"]), atol=1e-5
    )
    np.testing.assert_allclose(
        with_preset.encode(["Ned Kelly"], "passage"), plain.encode(["passage: Ned Kelly"]), atol=1e-5
    )


def test_kb_from_asearcher_files_served_and_found_by_its_clients(tmp_path):
    import glob
    import os

    import httpx

    from local_retriever.encoder import default_encoder_path

    corpus = write_jsonl(tmp_path / "wiki2018" / "wiki_corpus.jsonl", CORPUS)
    pages = write_jsonl(tmp_path / "wiki2018" / "wiki_webpages.jsonl", WEBPAGES)
    model = tmp_path / "intfloat__e5-base-v2"
    model.symlink_to(default_encoder_path(), target_is_directory=True)
    kb = tmp_path / "kb"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "local_retriever.cli",
            "build",
            str(corpus),
            "--out",
            str(kb),
            "--pages",
            str(pages),
            "--encoder",
            str(model),
            "--no-bm25",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    encoder = json.loads((kb / "manifest.json").read_text())["encoder"]
    assert (encoder["pooling"], encoder["query_prefix"], encoder["passage_prefix"]) == ("mean", "query: ", "passage: ")

    addr_dir, port = tmp_path / "rag_addr", free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "local_retriever.cli",
            "serve",
            str(kb),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--save-address-to",
            str(addr_dir),
            "--threads",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    addr_file = addr_dir / f"Host127.0.0.1_IP{port}.txt"
    try:
        _wait_for(addr_file, proc, "kb serve")
        # ASearcher's client: every line of every Host*_IP*.txt is an address, used as http://{addr}/...
        servers = [line for f in glob.glob(str(addr_dir) + "/Host*_IP*.txt") for line in open(f).readlines()]
        assert servers == [f"127.0.0.1:{port}"]
        base = f"http://{servers[0]}"
        hits = httpx.post(
            f"{base}/retrieve",
            json={"queries": ["Which bushranger wore armour?"], "topk": 4, "return_scores": False},
            timeout=60,
        ).json()["result"][0]
        assert {h["title"] for h in hits} == {"Beveridge, Victoria", "Ned Kelly", "Kwanza River"}
        assert all(h["contents"] and h["url"].startswith("https://en.wikipedia.org/") for h in hits)

        urls = [
            "https://en.wikipedia.org/w/index.php?title=Beveridge,%20Victoria",  # as stored
            "https://en.wikipedia.org/w/index.php/Ned%20Kelly",  # ASearcher's index.php/ form
            "https://en.wikipedia.org/wiki/Kwanza_River",  # a search hit's URL
            "https://de.wikipedia.org/wiki/Ned_Kelly",  # another language's Wikipedia
            "https://en.wikipedia.org/wiki/Nowhere",
        ]
        got = httpx.post(f"{base}/access", json={"urls": urls}, timeout=60).json()["result"]
        assert got[3] is None and got[4] is None
        for page, row, title in zip(got, WEBPAGES, ["Beveridge, Victoria", "Ned Kelly", "Kwanza River"]):
            assert page["title"] == title and page["url"] == row["url"]
            # Whole: the page holds every line of its source, in order; a first line naming the page is
            # its `title`.
            source, contents = nonblank(row["contents"]), nonblank(page["contents"])
            assert contents == source or [page["title"], *contents] == source, page
        assert got[2]["contents"] == "Kwanza\nThe Kwanza is a river in Angola."
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert proc.returncode == 143  # SIGTERM, after a graceful shutdown
    assert not addr_file.exists() and not [f for f in os.listdir(addr_dir) if f.startswith(".")]


def test_address_file_for_every_interface_names_the_machine(tmp_path, capsys):
    import socket

    from local_retriever.address import AddressFile

    ip, port = socket.gethostbyname(socket.gethostname()), free_port()
    with AddressFile(tmp_path, "0.0.0.0", port, poll_seconds=0.05) as address:
        assert address.path == tmp_path / f"Host{ip}_IP{port}.txt" and address.content == f"{ip}:{port}"
    assert not address.path.exists()  # nothing answered /health on that port: never written
    if ip.startswith("127."):
        assert "other nodes cannot reach" in capsys.readouterr().err
