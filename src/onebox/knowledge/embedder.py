"""Embeddings through a database cache: the same text is never embedded twice per model.

    embedder = CachedEmbedder(db, model)
    vectors = await embedder.passages(texts, progress=callback)

The cache key is (model name, query|passage, sha256(text)). Misses are embedded
in batches of ``model.max_batch`` and stored as each batch finishes, so an
interrupted ingestion keeps what it paid for.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence

from onebox.knowledge.queries import sql
from onebox.llm.embedding import EmbeddingKind, EmbeddingModel, Vector
from onebox.store.db import Database

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done, total)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form, ``[0.1,0.2,...]``."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def parse_vector(text: str) -> Vector:
    return [float(x) for x in text.strip("[]").split(",")]


class CachedEmbedder:
    """An :class:`EmbeddingModel` in front of ``onebox.embedding_cache``."""

    def __init__(self, db: Database, model: EmbeddingModel) -> None:
        self.db = db
        self.model = model
        self.embedded_count = 0  # texts this instance actually sent to the model

    async def passages(self, texts: Sequence[str], progress: Progress | None = None) -> list[Vector]:
        return await self.embed(texts, "passage", progress)

    async def queries(self, texts: Sequence[str]) -> list[Vector]:
        return await self.embed(texts, "query")

    async def query(self, text: str) -> Vector:
        return (await self.embed([text], "query"))[0]

    async def embed(
        self, texts: Sequence[str], kind: EmbeddingKind, progress: Progress | None = None
    ) -> list[Vector]:
        hashes = [content_hash(t) for t in texts]
        found = await self._lookup(sorted(set(hashes)), kind)
        missing: dict[str, str] = {}
        for h, t in zip(hashes, texts, strict=True):
            if h not in found:
                missing.setdefault(h, t)
        total, done = len(set(hashes)), len(set(hashes)) - len(missing)
        if progress:
            progress(done, total)
        items = list(missing.items())
        step = self.model.max_batch
        for start in range(0, len(items), step):
            batch = items[start : start + step]
            vectors = await self.model.embed([t for _, t in batch], kind)
            await self._store([h for h, _ in batch], vectors, kind)
            found.update({h: v for (h, _), v in zip(batch, vectors, strict=True)})
            self.embedded_count += len(batch)
            done += len(batch)
            if progress:
                progress(done, total)
        return [found[h] for h in hashes]

    async def _lookup(self, hashes: list[str], kind: EmbeddingKind) -> dict[str, Vector]:
        if not hashes:
            return {}
        rows = await self.db.fetch(
            sql("embedding.lookup"), {"model": self.model.name, "kind": kind, "hashes": hashes}
        )
        return {r["content_hash"]: parse_vector(r["embedding"]) for r in rows}

    async def _store(self, hashes: list[str], vectors: list[Vector], kind: EmbeddingKind) -> None:
        params = {
            "model": self.model.name, "kind": kind, "hashes": hashes,
            "vectors": [vector_literal(v) for v in vectors],
        }
        async with self.db.connection() as conn:
            await conn.execute(sql("embedding.store"), params)
