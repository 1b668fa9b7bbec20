"""Knowledge base on the real database: incremental indexing, search, filters, model binding."""

from __future__ import annotations

from pathlib import Path

import pytest
from knowledge_fakes import HashEmbeddingModel
from psycopg.types.json import Jsonb

from onebox.errors import Conflict
from onebox.knowledge import search as search_module
from onebox.knowledge.chunking import Section
from onebox.knowledge.collections import reembed_collection
from onebox.knowledge.embedder import vector_literal
from onebox.knowledge.ingest import DocumentInput
from onebox.knowledge.queries import sql
from onebox.knowledge.search import SearchFilters, SearchOptions
from onebox.knowledge.service import Knowledge

SECTIONS = [
    Section("Leases", "A worker renews its lease every ten seconds through a heartbeat."),
    Section("Fencing", "Every lease carries a fencing token; a stale token refuses writes."),
    Section("Queue", "Runnable work is claimed with FOR UPDATE SKIP LOCKED."),
]


async def _count(knowledge: Knowledge, sql: str) -> int:
    row = await knowledge.db.fetchone(sql)
    assert row is not None
    return int(next(iter(row.values())))


async def test_incremental_indexing(knowledge: Knowledge) -> None:
    doc = DocumentInput("runtime.md", SECTIONS, collection="docs", source_type="markdown")
    first = await knowledge.kb.add_document(doc)
    assert (first.status, first.chunks_added) == ("added", 3)
    embedded = knowledge.embedder.embedded_count

    again = await knowledge.kb.add_document(doc)
    assert again.status == "unchanged" and again.document_id == first.document_id

    changed = DocumentInput("runtime.md", [SECTIONS[0], Section("Fencing", "Tokens only grow."),
                                           SECTIONS[2]], collection="docs")
    result = await knowledge.kb.add_document(changed)
    assert (result.status, result.chunks_added, result.chunks_kept, result.chunks_removed) == (
        "updated", 1, 2, 1)
    assert knowledge.embedder.embedded_count == embedded + 1  # only the changed chunk
    contents = await knowledge.db.fetch(
        "SELECT content FROM onebox.kb_chunks ORDER BY ordinal")
    assert [r["content"] for r in contents][1] == "Tokens only grow."

    assert await knowledge.kb.remove("runtime.md", "docs")
    assert await _count(knowledge, "SELECT count(*) FROM onebox.kb_chunks") == 0
    assert await _count(knowledge, "SELECT n_rows FROM onebox.fts_spaces WHERE space='kb:docs'") == 0
    assert not await knowledge.kb.remove("runtime.md", "docs")


async def test_hit_has_chunk_document_scores_provenance(knowledge: Knowledge) -> None:
    await knowledge.kb.add_document(DocumentInput(
        "runtime.md", SECTIONS, collection="docs", title="Runtime",
        metadata={"team": "core"}, snapshot_id="snap-1"))
    hits = await knowledge.search("how often is the lease renewed?", k=2,
                                  filters=SearchFilters(collections=["docs"]))
    top = hits[0]
    assert "renews its lease" in top.content and top.heading == "Leases"
    assert top.document["title"] == "Runtime" and top.document["metadata"] == {"team": "core"}
    assert top.provenance["snapshot_id"] == "snap-1"
    assert set(top.scores) == {"fused", "fulltext", "vector"} and top.scores["fused"] > 0


async def test_single_candidate_scores_as_a_match(knowledge: Knowledge) -> None:
    await knowledge.kb.add_text("one.txt", "Snapshots are tar archives hashed with sha256.")
    for method in ("rrf", "score"):
        opts = SearchOptions(method=method)  # type: ignore[arg-type]
        [hit] = await knowledge.search("sha256 snapshots", k=5, options=opts)
        assert hit.scores["fused"] == pytest.approx(1.0)
    text_only = SearchOptions(weights={"fulltext": 1.0, "vector": 0.0}, method="score")
    [hit] = await knowledge.search("sha256", k=5, options=text_only)
    assert hit.scores["fused"] == pytest.approx(1.0)


async def test_chinese_full_text(knowledge: Knowledge) -> None:
    await knowledge.kb.add_text("zh.txt", "北京是中华人民共和国的首都。上海是中国最大的城市。")
    await knowledge.kb.add_text("en.txt", "Berlin is the capital of Germany.")
    text_only = SearchOptions(weights={"fulltext": 1.0, "vector": 0.0})
    hits = await knowledge.search("中国的首都", k=5, options=text_only)
    assert [h.document["source"] for h in hits] == ["zh.txt"]


async def test_selective_filter_still_returns_k(
    hash_knowledge: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = hash_knowledge.kb
    common = [Section(f"s{i}", f"common filler text number {i}") for i in range(1998)]
    await kb.add_document(DocumentInput("common", common, metadata={"tenant": "big"}))
    rare = [Section("r1", "rare tenant text one"), Section("r2", "rare tenant text two")]
    await kb.add_document(DocumentInput("rare", rare, metadata={"tenant": "small"}))
    filters = SearchFilters(metadata={"tenant": "small"})
    # the hazard is real on this server: an HNSW scan followed by the filter comes back short
    q = await hash_knowledge.embedder.query("unrelated query text")
    async with hash_knowledge.db.transaction() as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        await conn.execute("SET LOCAL enable_sort = off")
        cur = await conn.execute(sql("search.vector_ann"), {
            "q": vector_literal(q), "n": 2, "collections": ["default"],
            "meta": Jsonb({"tenant": "small"}), "since": None, "until": None})
        assert len(await cur.fetchall()) < 2
    vector_only = SearchOptions(weights={"fulltext": 0.0, "vector": 1.0}, candidates=2)
    hits = await hash_knowledge.search("unrelated query text", k=2, filters=filters,
                                       options=vector_only)
    assert sorted(h.content for h in hits) == ["rare tenant text one", "rare tenant text two"]
    # the large-filter path (HNSW first, exact fallback when short) must also return both
    monkeypatch.setattr(search_module, "EXACT_SCAN_MAX_ROWS", 0)
    hits = await hash_knowledge.search("unrelated query text", k=2, filters=filters,
                                       options=vector_only)
    assert len(hits) == 2


async def test_switching_model_is_refused_until_reembed(hash_knowledge: Knowledge) -> None:
    await hash_knowledge.kb.add_text("a.txt", "alpha beta gamma", collection="c")
    other = Knowledge.build(hash_knowledge.db, HashEmbeddingModel("test/other-384"))
    with pytest.raises(Conflict, match="kb reembed"):
        await other.search("alpha", filters=SearchFilters(collections=["c"]))
    with pytest.raises(Conflict):
        await other.kb.add_text("b.txt", "delta", collection="c")
    assert await reembed_collection(other.db, other.embedder, "c") == 1
    assert len(await other.search("alpha", filters=SearchFilters(collections=["c"]))) == 1


async def test_add_paths_reports_progress(hash_knowledge: Knowledge, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\nSome text.\n\n## Part\n\nMore text.\n")
    (tmp_path / "b.py").write_text("def f():\n    return 1\n")
    (tmp_path / ".hidden.txt").write_text("skip me")
    seen = []
    results = await hash_knowledge.kb.add_paths(
        [tmp_path], collection="files", progress=lambda p: seen.append(p.files_done))
    assert [r.status for r in results] == ["added", "added"]
    assert seen[-1] == 2
    docs = await hash_knowledge.kb.list_documents("files")
    assert {d["source_type"] for d in docs} == {"markdown", "code"}


async def test_cache_invalidated_when_source_changes(hash_knowledge: Knowledge) -> None:
    result = await hash_knowledge.kb.add_text("port.txt", "The server listens on port 8080.")
    cache = hash_knowledge.cache
    await cache.put("Which port does the server use?", "8080",
                    source_doc_ids=[result.document_id])
    assert await cache.lookup("Which port does the server use?") is not None
    await hash_knowledge.kb.add_text("port.txt", "The server listens on port 9090.")
    assert await cache.lookup("Which port does the server use?") is None
