"""Re-embed every memory with the configured model (``onebox kb reembed`` does chunks, then this).

    n = await reembed_memories(db, embedder, progress=lambda done, total: ...)

A memory is embedded as it was remembered: its conversation context (kept in
``metadata["context"]``) and its content, as a passage. Pages of ``PAGE_ROWS``
memories are embedded (through the embedding cache) and written one page per
transaction, so memory use stays bounded and an interrupted run keeps its pages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onebox.knowledge.embedder import CachedEmbedder, vector_literal
from onebox.knowledge.queries import sql
from onebox.store.db import Database

PAGE_ROWS = 512


def memory_text(row: dict[str, Any]) -> str:
    """The text a memory was embedded from (see ``MemoryStore.remember``)."""
    context = row.get("context")
    return f"{context}\n{row['content']}" if context and context.strip() else str(row["content"])


async def reembed_memories(
    db: Database, embedder: CachedEmbedder, progress: Callable[[int, int], None] | None = None,
) -> int:
    """Re-compute every memory's vector; returns how many were re-embedded."""
    total = int((await db.fetchone(sql("reembed.count_memories"), {}) or {"n": 0})["n"])
    done, after = 0, ""
    while True:
        rows = await db.fetch(sql("reembed.memories_page"), {"after": after, "limit": PAGE_ROWS})
        if not rows:
            return done
        vectors = await embedder.passages([memory_text(r) for r in rows])
        async with db.transaction() as conn:
            await conn.execute(sql("reembed.set_memory_embeddings"), {
                "ids": [r["id"] for r in rows], "embeddings": [vector_literal(v) for v in vectors]})
        done, after = done + len(rows), str(rows[-1]["id"])
        if progress:
            progress(done, total)
