"""The suite's own shortcuts are safe: the sample KB the quickstart built is reused only when it holds what the
`sample_kb` fixture would build."""

import json
import os
import shutil

from tests.conftest import quickstart_kb_matches


def test_a_quickstart_kb_is_reused_only_when_it_is_the_same_build(sample_kb, tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    shutil.copy(sample_kb / "manifest.json", kb / "manifest.json")
    assert quickstart_kb_matches(kb)
    manifest = json.loads((kb / "manifest.json").read_text())
    for field, other in [
        ("encoder", {**manifest["encoder"], "model": "intfloat/e5-base-v2"}),
        ("faiss_factory", "HNSW32"),
    ]:
        (kb / "manifest.json").write_text(json.dumps({**manifest, field: other}))
        assert not quickstart_kb_matches(kb), field
    (kb / "manifest.json").write_text(json.dumps(manifest))
    os.utime(kb / "manifest.json", (0, 0))  # built before the retriever's code last changed
    assert not quickstart_kb_matches(kb)
    assert not quickstart_kb_matches(tmp_path / "nothing-here")
