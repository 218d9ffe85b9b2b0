"""`manifest.json`: what a knowledge-base folder holds and how it was built."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

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
    dense_index: Optional[str] = None
    faiss_factory: Optional[str] = None
    encoder: Optional[EncoderConfig] = None
    bm25_index: Optional[str] = None
    skipped_lines: int = 0
    build_seconds: float = 0.0

    def save(self, kb_dir: Path) -> None:
        (Path(kb_dir) / MANIFEST_FILE).write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, kb_dir: Path) -> "Manifest":
        path = Path(kb_dir) / MANIFEST_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{kb_dir} is not a knowledge base: {MANIFEST_FILE} is missing (run `asearcher kb build`)")
        return cls.model_validate_json(path.read_text())

    def corpus_path(self, kb_dir: Path) -> Path:
        p = Path(self.corpus)
        return p if p.is_absolute() else Path(kb_dir) / p
