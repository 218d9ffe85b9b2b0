"""`manifest.json`: what a knowledge-base folder holds and how it was built."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel

from .encoder import EncoderConfig

MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1


class Manifest(BaseModel):
    format_version: int = FORMAT_VERSION
    corpus: str  # relative to the KB folder when inside it, else absolute (indexed in place)
    passages: int
    pages: int = 0
    redirects: int = 0
    source: str = ""
    source_format: str = ""
    dense_index: str | None = None
    faiss_factory: str | None = None
    encoder: EncoderConfig | None = None
    bm25_index: str | None = None
    skipped_lines: int = 0
    build_seconds: float = 0.0

    def save(self, kb_dir: Path) -> None:
        write_durable(Path(kb_dir) / MANIFEST_FILE, self.model_dump_json(indent=2).encode())

    @classmethod
    def load(cls, kb_dir: Path) -> Manifest:
        path = Path(kb_dir) / MANIFEST_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{kb_dir} is not a knowledge base: {MANIFEST_FILE} is missing (run `asearcher kb build`)"
            )
        return cls.model_validate_json(path.read_text())

    def identity_sha256(self) -> str:
        """sha256 of what the KB holds and how it was built: the manifest as canonical JSON, without the build's
        duration and with only the source's file name, so the same build on two machines hashes the same."""
        import hashlib

        data = self.model_dump(mode="json", exclude={"build_seconds"})
        data["source"] = Path(self.source).name
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def corpus_path(self, kb_dir: Path) -> Path:
        p = Path(self.corpus)
        return p if p.is_absolute() else Path(kb_dir) / p


# Build stages. A stage is complete only when its marker exists, and the marker is written last,
# after every file of the stage is fsync'd; it records the inputs (fingerprint) and the size of
# each file, so a stage whose inputs changed or whose files went missing is built again.
STAGE_SUFFIX = ".stage.json"


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Writes `path` so that a crash leaves either the old file or the whole new one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)


def stage_path(work: Path, name: str) -> Path:
    return Path(work) / f".{name}{STAGE_SUFFIX}"


def mark_stage(work: Path, name: str, fingerprint: dict, outputs: list[str], result: dict | None = None) -> dict:
    """Records stage `name` as complete; `outputs` are files or folders relative to `work`."""
    work = Path(work)
    files = {}
    for rel in outputs:
        top = work / rel
        for f in sorted(top.rglob("*")) if top.is_dir() else [top]:
            if f.is_file():
                fsync_path(f)
                files[f.relative_to(work).as_posix()] = f.stat().st_size
        fsync_path(top if top.is_dir() else top.parent)
    record = {"stage": name, "fingerprint": fingerprint, "files": files, "result": result or {}}
    write_durable(stage_path(work, name), json.dumps(record, indent=1).encode())
    return record


def completed_stage(work: Path, name: str, fingerprint: dict) -> dict | None:
    """The record of stage `name` if it completed for these inputs and its files are all still there."""
    work = Path(work)
    try:
        record = json.loads(stage_path(work, name).read_text())
    except (OSError, ValueError):
        return None
    fingerprint = json.loads(json.dumps(fingerprint))  # compared as stored: tuples become lists
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint or not record.get("files"):
        return None
    for rel, size in record["files"].items():
        f = work / rel
        if not f.is_file() or f.stat().st_size != size:
            return None
    return record


def clear_stage(work: Path, name: str) -> None:
    stage_path(work, name).unlink(missing_ok=True)
