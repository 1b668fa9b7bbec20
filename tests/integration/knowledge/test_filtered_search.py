"""Filtered hybrid search on the real database: a selective filter still returns k rows, all of
them inside the filter, on the path where a plain HNSW scan (filter applied after the scan)
comes back short."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from knowledge_fakes import HashEmbeddingModel
from psycopg.types.json import Jsonb

from onebox.knowledge import search as search_module
from onebox.knowledge.chunking import Section
from onebox.knowledge.embedder import vector_literal
from onebox.knowledge.ingest import DocumentInput
from onebox.knowledge.search import SearchFilters, SearchOptions
from onebox.knowledge.service import Knowledge
from onebox.store.db import Database

N_COMMON, N_RARE, K = 800, 12, 10


async def _corpus(knowledge: Knowledge) -> None:
    common = [Section(f"c{i}", f"shared words about leases and queues, common row {i}")
              for i in range(N_COMMON)]
    await knowledge.kb.add_document(DocumentInput("common", common, metadata={"tenant": "big"}))
    rare = [Section(f"r{i}", f"shared words about leases, rare tenant row {i}") for i in range(N_RARE)]
    await knowledge.kb.add_document(DocumentInput("rare", rare, metadata={"tenant": "small"}))


async def _plain_hnsw_rows(db: Database, vector: list[float], n: int) -> int:
    """The hazard: the index scan stops at ef_search candidates, then the filter drops them."""
    async with db.transaction() as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        await conn.execute("SET LOCAL hnsw.ef_search = 40")
        cur = await conn.execute(
            "SELECT c.id FROM onebox.kb_chunks c WHERE c.metadata @> %(meta)s "
            "ORDER BY c.embedding <=> %(q)s::vector LIMIT %(n)s",
            {"meta": Jsonb({"tenant": "small"}), "q": vector_literal(vector), "n": n})
        return len(await cur.fetchall())


@pytest.mark.parametrize("exact_scan_max_rows", [0, 20_000], ids=["index-path", "exact-path"])
async def test_selective_filter_returns_k_rows_all_inside_it(
    db: Database, monkeypatch: pytest.MonkeyPatch, exact_scan_max_rows: int
) -> None:
    knowledge = Knowledge.build(db, HashEmbeddingModel())
    await _corpus(knowledge)
    query = "shared words about leases"
    assert await _plain_hnsw_rows(db, await knowledge.embedder.query(query), K) < K
    monkeypatch.setattr(search_module, "EXACT_SCAN_MAX_ROWS", exact_scan_max_rows)
    filters = SearchFilters(metadata={"tenant": "small"})
    for weights in ({"fulltext": 0.3, "vector": 0.7}, {"fulltext": 0.0, "vector": 1.0}):
        hits = await knowledge.search(query, k=K, filters=filters,
                                      options=SearchOptions(weights=weights, candidates=K))
        assert len(hits) == K, weights
        assert {h.document["metadata"]["tenant"] for h in hits} == {"small"}
        assert all("rare tenant row" in h.content for h in hits)


async def test_filter_matching_nothing_returns_nothing(db: Database) -> None:
    knowledge = Knowledge.build(db, HashEmbeddingModel())
    await _corpus(knowledge)
    later = datetime.now(UTC) + timedelta(days=1)
    for filters in (SearchFilters(metadata={"tenant": "nobody"}), SearchFilters(since=later)):
        assert await knowledge.search("shared words about leases", k=K, filters=filters) == []
