"""Speed runs: hybrid search at scale (synthetic vectors/text), memory at 10k, embedding throughput."""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from onebox.knowledge.collections import ensure_collection, space_of
from onebox.knowledge.embedder import vector_literal
from onebox.knowledge.memory import space_of as memory_space
from onebox.knowledge.queries import sql
from onebox.knowledge.search import SearchFilters
from onebox.knowledge.service import Knowledge
from onebox.knowledge.text import first_sentence
from retrieval_metrics import p95

E5_LAYERS, E5_HIDDEN, E5_FFN = 12, 384, 1536


def _vocab(n: int = 20000) -> list[str]:
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(n)]


def _sentence(rng: random.Random, vocab: list[str], n: int) -> str:
    idx = np.minimum(rng_zipf(rng, n), len(vocab)) - 1
    return " ".join(vocab[i] for i in idx) + "."


def rng_zipf(rng: random.Random, n: int) -> np.ndarray:
    return np.random.default_rng(rng.randint(0, 2**31)).zipf(1.3, n)


def _unit_vectors(n: int, seed: int) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((n, 384)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


async def build_scale_collection(knowledge: Knowledge, collection: str, n_chunks: int) -> dict[str, Any]:
    """Synthetic chunks inserted in batches straight through the chunk SQL (no model)."""
    db = knowledge.db
    await ensure_collection(db, collection, knowledge.embedder.model)
    have = await db.fetchone("SELECT count(*) AS n FROM onebox.kb_chunks WHERE collection = %s",
                             (collection,))
    if have and have["n"] >= n_chunks:
        return {"chunks": have["n"], "reused": True}
    rng, vocab = random.Random(1), _vocab()
    started, batch = time.perf_counter(), 1000
    for start in range(int(have["n"] if have else 0), n_chunks, batch):
        doc_id = str(uuid.uuid4())
        texts = [_sentence(rng, vocab, 60) for _ in range(batch)]
        vectors = _unit_vectors(batch, start)
        async with db.transaction() as conn:
            await conn.execute(sql("kb.upsert_document"), {
                "id": doc_id, "collection": collection, "source": f"synthetic-{start}",
                "source_type": "text", "title": None, "content_hash": "0" * 64,
                "metadata": Jsonb({"batch": start // batch}), "execution_id": None,
                "snapshot_id": None, "n_chunks": batch})
            cur = await conn.execute(sql("kb.insert_chunks"), {
                "document_id": doc_id, "collection": collection,
                "metadata": Jsonb({"batch": start // batch}),
                "ordinals": list(range(batch)), "contents": texts,
                "hashes": [f"{start + i:064d}" for i in range(batch)], "headings": [None] * batch,
                "n_tokens": [80] * batch, "segs": texts,
                "embeddings": [vector_literal(v) for v in vectors]})
            ids = [r["id"] for r in await cur.fetchall()]
            await conn.execute(sql("fts.add_kb_terms"), {"ids": ids, "space": space_of(collection)})
        if start % 10000 == 0:
            print(f"  scale: {start + batch}/{n_chunks} chunks", flush=True)
    async with db.connection() as conn:
        await conn.execute("ANALYZE onebox.kb_chunks")
    seconds = time.perf_counter() - started
    return {"chunks": n_chunks, "reused": False, "insert_seconds": round(seconds, 1)}


async def search_latency(knowledge: Knowledge, collection: str, n_queries: int = 60) -> dict[str, Any]:
    rng, vocab = random.Random(99), _vocab()
    filters = SearchFilters(collections=[collection])
    total, without_embedding = [], []
    for i in range(n_queries):
        query = f"{_sentence(rng, vocab, 8)} q{i}-{uuid.uuid4().hex[:6]}"  # never cached
        started = time.perf_counter()
        await knowledge.search(query, k=10, filters=filters)
        total.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()  # same query again: its embedding is now cached
        await knowledge.search(query, k=10, filters=filters)
        without_embedding.append((time.perf_counter() - started) * 1000)
    return {"queries": n_queries, "k": 10,
            "p95_ms_including_query_embedding": round(p95(total), 1),
            "p50_ms_including_query_embedding": round(float(np.median(total)), 1),
            "p95_ms_excluding_query_embedding": round(p95(without_embedding), 1)}


async def memory_latency(knowledge: Knowledge, scope: str, n_memories: int = 10000,
                         n_ops: int = 100) -> dict[str, Any]:
    db, rng, vocab = knowledge.db, random.Random(5), _vocab()
    have = await db.fetchone("SELECT count(*) AS n FROM onebox.memories WHERE scope = %s", (scope,))
    if not have or have["n"] < n_memories:
        await _bulk_memories(knowledge, scope, n_memories, rng, vocab)
    contents = [f"{_sentence(rng, vocab, 20)} r{uuid.uuid4().hex[:8]}" for _ in range(n_ops)]
    await knowledge.embedder.passages(contents)  # embedding excluded from the timing below
    remember = []
    for content in contents:
        started = time.perf_counter()
        await knowledge.memory.remember(scope, content)
        remember.append((time.perf_counter() - started) * 1000)
    recall, recall_cached = [], []
    for i in range(n_ops):
        query = f"{_sentence(rng, vocab, 6)} m{i}-{uuid.uuid4().hex[:6]}"
        started = time.perf_counter()
        await knowledge.memory.recall(scope, query, k=10)
        recall.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await knowledge.memory.recall(scope, query, k=10)
        recall_cached.append((time.perf_counter() - started) * 1000)
    return {"memories": n_memories, "operations": n_ops,
            "remember_p95_ms_excluding_embedding": round(p95(remember), 1),
            "recall_p95_ms_including_query_embedding": round(p95(recall), 1),
            "recall_p95_ms_excluding_query_embedding": round(p95(recall_cached), 1)}


async def _bulk_memories(knowledge: Knowledge, scope: str, n: int, rng: random.Random,
                         vocab: list[str]) -> None:
    vectors = _unit_vectors(n, 11)
    async with knowledge.db.transaction() as conn:
        ids = []
        for i in range(n):
            content = _sentence(rng, vocab, 20)
            ids.append(str(uuid.uuid4()))
            await conn.execute(sql("memory.insert"), {
                "id": ids[-1], "scope": scope, "user_id": "", "kind": "short",
                "content": content, "hash": f"{i:064d}", "summary": first_sentence(content),
                "entities": [], "metadata": Jsonb({}), "embedding": vector_literal(vectors[i]),
                "seg": content, "execution_id": None, "valid_from": None})
        await conn.execute(sql("fts.add_memory_terms"), {"ids": ids, "space": memory_space(scope)})


async def embedding_throughput(knowledge: Knowledge, n: int = 8) -> dict[str, Any]:
    """Fresh ~300-token passages through the model, against a measured matrix-multiply peak."""
    rng, vocab = random.Random(uuid.uuid4().int), _vocab()
    texts = [" ".join(rng.choice(vocab[:3000]) for _ in range(110)) for _ in range(n)]
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
