"""Hybrid search over the knowledge base: BM25 full-text + HNSW cosine, fused, optionally reranked.

    hits = await search(db, embedder, "how are leases renewed?", k=5,
                        filters=SearchFilters(collections=["docs"], metadata={"lang": "en"}))

A filtered vector search must return k hits whenever k matching chunks exist.
An HNSW scan stops after ``ef_search`` candidates and the filter runs after it,
so a selective filter could silently return fewer rows. With pgvector >= 0.8
the scan is iterative (``hnsw.iterative_scan = relaxed_order``): it goes on
until enough rows pass the filter. A metadata or date filter is counted first
(capped at ``EXACT_SCAN_MAX_ROWS``): so small a set is scanned exactly, which
is cheaper than walking the graph for it. On pgvector 0.6 a short HNSW result
falls back to the exact scan. A filter on collections alone skips the count
(``fts_spaces`` holds the sizes).

Each retriever returns at most ``candidates`` rows before fusion; the full-text
arm is one round trip for the query's terms and one for BM25 (``fts.py``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from onebox.errors import NotFound, ValidationError
from onebox.knowledge.collections import check_model, space_of
from onebox.knowledge.embedder import CachedEmbedder, vector_literal
from onebox.knowledge.fts import build_fts_query
from onebox.knowledge.fusion import FusionMethod, fuse
from onebox.knowledge.queries import sql
from onebox.store.db import Database

EXACT_SCAN_MAX_ROWS = 2_000  # an exact scan reads every filtered vector (~10 us each, TOASTed)
_ITERATIVE: weakref.WeakKeyDictionary[Database, bool] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class SearchFilters:
    collections: list[str] | None = None  # None: every collection
    metadata: dict[str, Any] | None = None  # JSON containment on chunk metadata
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class SearchOptions:
    # chosen on a dev half of SciFact and CMRC (bench/retrieval.py, fusion_choice)
    weights: dict[str, float] = field(default_factory=lambda: {"fulltext": 0.4, "vector": 0.6})
    method: FusionMethod = "score"
    candidates: int = 50  # per retriever, before fusion


@dataclass(frozen=True)
class SearchHit:
    chunk_id: int
    content: str
    heading: str | None
    ordinal: int
    document: dict[str, Any]  # id, collection, source, source_type, title, n_chunks, metadata
    scores: dict[str, float]  # fused, fulltext (bm25), vector (cosine); absent when not found
    provenance: dict[str, Any]  # execution_id, snapshot_id, created_at

    def to_dict(self) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk_id, "content": self.content, "heading": self.heading,
            "ordinal": self.ordinal, "document_id": self.document.get("id"),
            "document": self.document, "scores": self.scores,
            "provenance": self.provenance,
        }


Reranker = Callable[[str, list[SearchHit]], Awaitable[list[SearchHit]]]


async def search(
    db: Database, embedder: CachedEmbedder, query: str, k: int = 10,
    filters: SearchFilters | None = None, options: SearchOptions | None = None,
    reranker: Reranker | None = None,
) -> list[SearchHit]:
    if not query.strip():
        raise ValidationError("the search query is empty", field="query")
    if not 1 <= k <= 1000:
        raise ValidationError("k must be between 1 and 1000", field="k")
    filters = filters or SearchFilters()
    options = options or SearchOptions()
    collections = await _collections(db, embedder, filters.collections)
    if not collections:
        return []
    params = _filter_params(filters, collections)
    n = max(options.candidates, k)
    stages: dict[str, Awaitable[list[tuple[Any, float]]]] = {}
    if options.weights.get("fulltext", 0) > 0:
        stages["fulltext"] = fulltext_candidates(db, query, params, n)
    if options.weights.get("vector", 0) > 0:
        stages["vector"] = _vector_stage(db, embedder, query, filters, collections, params, n)
    # the two retrievers run concurrently: BM25 in PostgreSQL while the query is embedded
    lists = dict(zip(stages, await asyncio.gather(*stages.values()), strict=True))
    fused = fuse(lists, options.weights, options.method)[:k]
    hits = await _load_hits(db, fused)
    return await reranker(query, hits) if reranker else hits


async def _vector_stage(
    db: Database, embedder: CachedEmbedder, query: str, filters: SearchFilters,
    collections: list[str], params: dict[str, Any], n: int,
) -> list[tuple[Any, float]]:
    vector = await embedder.query(query)
    filtered = await _needs_filter_check(db, filters, collections)
    return await vector_candidates(db, vector, params, n, filtered=filtered)


async def _collections(
    db: Database, embedder: CachedEmbedder, names: list[str] | None
) -> list[str]:
    rows = await db.fetch(sql("search.collections"), {"names": names or None})
    missing = sorted(set(names or []) - {r["name"] for r in rows})
    if missing:
        raise NotFound(f"collection {missing[0]!r} does not exist; add documents with `onebox kb add`")
    for row in rows:
        check_model(row, embedder.model)
    return [r["name"] for r in rows]


async def _needs_filter_check(
    db: Database, filters: SearchFilters, collections: list[str]
) -> bool:
    """Metadata/date filters always need the size check. A collection filter alone needs it
    only when the chosen collections are a minority of the rows (sizes kept in fts_spaces)."""
    if filters.metadata or filters.since or filters.until:
        return True
    if not filters.collections:
        return False
    rows = await db.fetch(sql("search.collection_sizes"), {})
    sizes = {r["space"]: int(r["n_rows"]) for r in rows}
    chosen = sum(sizes.get(space_of(c), 0) for c in collections)
    return chosen <= EXACT_SCAN_MAX_ROWS or chosen < sum(sizes.values()) / 2


def _filter_params(filters: SearchFilters, collections: list[str]) -> dict[str, Any]:
    return {
        "collections": collections,
        "meta": Jsonb(filters.metadata) if filters.metadata else None,
        "since": filters.since, "until": filters.until,
    }


async def fulltext_candidates(
    db: Database, query: str, params: dict[str, Any], n: int
) -> list[tuple[Any, float]]:
    spaces = [space_of(c) for c in params["collections"]]
    fts = await build_fts_query(db, query, spaces)
    if fts is None:
        return []
    rows = await fetch_planned(db, "search.fulltext", {**params, **fts.params(), "n": n})
    return [(r["id"], float(r["score"])) for r in rows]


async def vector_candidates(
    db: Database, vector: list[float], params: dict[str, Any], n: int, filtered: bool
) -> list[tuple[Any, float]]:
    args = {**params, "q": vector_literal(vector), "n": n}
    iterative = await iterative_scans(db)
    if filtered and (not iterative or _row_filter(params)):
        count = await fetch_planned(db, "search.count_filtered",
                                    {**params, "cap": EXACT_SCAN_MAX_ROWS + 1})
        if count[0]["n"] <= EXACT_SCAN_MAX_ROWS:
            return await _exact(db, args)
    async with db.transaction() as conn:
        await set_hnsw_scan(conn, min(1000, max(40, 2 * n)), iterative)
        rows = await fetch_planned(conn, "search.vector_ann", args)
    if len(rows) < n and filtered:  # iterative scans stop at hnsw.max_scan_tuples; 0.6 earlier
        return await _exact(db, args)
    return [(r["id"], float(r["score"])) for r in rows]


async def fetch_planned(
    db: Database | AsyncConnection[Any], name: str, args: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run a statement with optional filters planned for these values (``prepare=False``).
    A prepared statement turns generic after five runs, and a generic plan cannot drop the
    ``(%(meta)s IS NULL OR ...)`` arms: at 100k chunks it scanned the whole table in
    parallel (117 ms) where the plan for the values uses the GIN index (8 ms)."""
    if isinstance(db, Database):
        async with db.connection() as conn:
            return await fetch_planned(conn, name, args)
    cur = await db.execute(sql(name), args, prepare=False)
    return list(await cur.fetchall())


async def set_hnsw_scan(conn: AsyncConnection[Any], ef_search: int, iterative: bool) -> None:
    """For the current transaction: the HNSW candidate list, and iterative scans when the
    server has them (a filtered scan then continues until enough rows pass)."""
    await conn.execute(
        "SELECT set_config('hnsw.ef_search', %(ef)s, true)"
        + (", set_config('hnsw.iterative_scan', 'relaxed_order', true)" if iterative else ""),
        {"ef": str(ef_search)})


def _row_filter(params: dict[str, Any]) -> bool:
    """A metadata or date filter (its size is unknown without counting)."""
    return any(params.get(k) is not None for k in ("meta", "since", "until"))


async def iterative_scans(db: Database) -> bool:
    """Whether the server's pgvector (>= 0.8) scans HNSW iteratively under a filter."""
    features = getattr(db, "features", None)
    if features is not None:
        return bool(features.iterative_index_scan)
    if db not in _ITERATIVE:
        row = await db.fetchone(sql("search.pgvector_version"))
        version = tuple(int(p) for p in str(row["extversion"] if row else "0").split(".")[:2]
                        if p.isdigit())
        _ITERATIVE[db] = version >= (0, 8)
    return _ITERATIVE[db]


async def _exact(db: Database, args: dict[str, Any]) -> list[tuple[Any, float]]:
    rows = await fetch_planned(db, "search.vector_exact", args)
    return [(r["id"], float(r["score"])) for r in rows]


async def _load_hits(db: Database, fused: list[Any]) -> list[SearchHit]:
    if not fused:
        return []
    rows = {r["chunk_id"]: r for r in await db.fetch(sql("kb.hits"), {"ids": [f.id for f in fused]})}
    hits = []
    for f in fused:
        row = rows.get(f.id)
        if row is None:  # deleted between the two queries
            continue
        scores = {"fused": round(f.score, 6), **{k: round(v, 6) for k, v in f.raw.items()}}
        hits.append(SearchHit(
            chunk_id=row["chunk_id"], content=row["content"], heading=row["heading"],
            ordinal=row["ordinal"], scores=scores,
            document={"id": str(row["document_id"]), "collection": row["collection"],
                      "source": row["source"], "source_type": row["source_type"],
                      "title": row["title"], "n_chunks": row["n_chunks"],
                      "metadata": row["document_metadata"]},
            provenance={"execution_id": _str(row["execution_id"]),
                        "snapshot_id": row["snapshot_id"],
                        "created_at": row["created_at"].isoformat()},
        ))
    return hits


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
