"""Quality runs: BEIR-style retrieval (SciFact, CMRC sentences), LoCoMo memory recall, cache guard."""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any

import retrieval_locomo
from onebox.knowledge.chunking import Section
from onebox.knowledge.fusion import fuse
from onebox.knowledge.ingest import DocumentInput
from onebox.knowledge.search import SearchOptions, fulltext_candidates, vector_candidates
from onebox.knowledge.service import Knowledge
from retrieval_data import load_locomo
from retrieval_metrics import dedupe, mean, ndcg_at, recall_at

MODES: dict[str, dict[str, Any]] = {
    "fulltext": {"weights": {"fulltext": 1.0, "vector": 0.0}, "method": "rrf"},
    "vector": {"weights": {"fulltext": 0.0, "vector": 1.0}, "method": "rrf"},
}
VARIANTS: dict[str, dict[str, Any]] = {
    "rrf_50_50": {"weights": {"fulltext": 0.5, "vector": 0.5}, "method": "rrf"},
    "rrf_30_70": {"weights": {"fulltext": 0.3, "vector": 0.7}, "method": "rrf"},
    "score_30_70": {"weights": {"fulltext": 0.3, "vector": 0.7}, "method": "score"},
    "score_50_50": {"weights": {"fulltext": 0.5, "vector": 0.5}, "method": "score"},
}


# The fusion settings a default is chosen among: each method, full-text weight 0.0 to 1.0.
GRID: dict[str, dict[str, Any]] = {
    f"{method}_{round(w * 100):02d}_{round((1 - w) * 100):02d}": {
        "weights": {"fulltext": round(w, 2), "vector": round(1 - w, 2)}, "method": method}
    for method in ("score", "rrf") for w in [i / 10 for i in range(11)]}


def split_of(query_id: str) -> str:
    """A query's half, fixed by its id: "dev" (defaults are chosen on it) or "heldout"."""
    return "dev" if int(hashlib.sha1(query_id.encode()).hexdigest(), 16) % 2 == 0 else "heldout"


def choose_fusion(grids: dict[str, dict[str, Any]], shipped: dict[str, Any]) -> dict[str, Any]:
    """The grid setting with the best mean dev nDCG@10 over the sets, and every set's
    held-out nDCG@10 for it and for the shipped setting (never used to choose)."""
    def dev_mean(name: str) -> float:
        return sum(g[name]["dev"] for g in grids.values()) / len(grids)

    best = max(GRID, key=dev_mean)
    shipped_name = next((n for n, spec in GRID.items() if spec == shipped), None)
    return {
        "chosen_on": "mean dev nDCG@10 over " + ", ".join(sorted(grids)),
        "chosen": {"name": best, **GRID[best], "dev_mean": round(dev_mean(best), 4)},
        "shipped": {"name": shipped_name, **shipped,
                    "dev_mean": round(dev_mean(shipped_name), 4) if shipped_name else None},
        "heldout_ndcg@10": {
            s: {"chosen": g[best]["heldout"],
                "shipped": g[shipped_name]["heldout"] if shipped_name else None,
                "queries": g[best]["heldout_queries"]} for s, g in grids.items()},
        "dev_ndcg@10": {s: {"chosen": g[best]["dev"],
                            "shipped": g[shipped_name]["dev"] if shipped_name else None,
                            "queries": g[best]["dev_queries"]} for s, g in grids.items()},
    }


async def ingest(knowledge: Knowledge, docs: list[DocumentInput]) -> dict[str, Any]:
    """Ingest through the real path; reports chunks/s and how many texts needed the model."""
    before = knowledge.embedder.embedded_count
    started = time.perf_counter()

    def report(done: int, total: int) -> None:
        print(f"  ingested {done}/{total}", flush=True)

    results = await knowledge.kb.add_documents(docs, report)
    chunks = sum(r.chunks_added + r.chunks_kept for r in results)
    seconds = time.perf_counter() - started
    return {"documents": len(docs), "unchanged_documents": sum(r.status == "unchanged" for r in results),
            "chunks_written": chunks, "seconds": round(seconds, 1),
            "chunks_per_s": round(chunks / seconds, 1) if seconds and chunks else None,
            "newly_embedded": knowledge.embedder.embedded_count - before}


async def _source_of(knowledge: Knowledge, collection: str) -> dict[int, str]:
    rows = await knowledge.db.fetch(
        "SELECT c.id, d.source FROM onebox.kb_chunks c JOIN onebox.kb_documents d "
        "ON d.id = c.document_id WHERE c.collection = %s", (collection,))
    return {r["id"]: r["source"] for r in rows}


async def evaluate(
    knowledge: Knowledge, collection: str, queries: dict[str, str],
    qrels: dict[str, dict[str, int]], cutoffs: dict[str, tuple[str, int]], depth: int = 100,
) -> dict[str, Any]:
    """Every mode from the same candidate lists; 'hybrid' is the shipped default fusion."""
    source = await _source_of(knowledge, collection)
    params = {"collections": [collection], "meta": None, "since": None, "until": None}
    default = SearchOptions()
    modes = {**MODES, "hybrid": {"weights": default.weights, "method": default.method},
             **{f"variant_{k}": v for k, v in VARIANTS.items()}}
    scores: dict[str, dict[str, list[float]]] = {m: {c: [] for c in cutoffs} for m in modes}
    grid: dict[str, dict[str, list[float]]] = {g: {"dev": [], "heldout": []} for g in GRID}
    ids = [q for q in qrels if q in queries]
    for n, qid in enumerate(ids):
        lists = {
            "fulltext": await fulltext_candidates(knowledge.db, queries[qid], params, depth),
            "vector": await vector_candidates(
                knowledge.db, await knowledge.embedder.query(queries[qid]), params, depth, False),
        }
        relevant = {d for d, s in qrels[qid].items() if s > 0}
        for mode, spec in modes.items():
            fused = fuse(lists, spec["weights"], spec["method"])
            ranked = dedupe([source[f.id] for f in fused if f.id in source])
            for name, (metric, k) in cutoffs.items():
                fn = ndcg_at if metric == "ndcg" else recall_at
                scores[mode][name].append(fn(ranked, relevant, k))
        for name, spec in GRID.items():
            fused = fuse(lists, spec["weights"], spec["method"])
            ranked = dedupe([source[f.id] for f in fused if f.id in source])
            grid[name][split_of(qid)].append(ndcg_at(ranked, relevant, 10))
        if n % 200 == 199:
            print(f"  evaluated {n + 1}/{len(ids)} queries", flush=True)
    out: dict[str, Any] = {m: {c: mean(v) for c, v in s.items()} for m, s in scores.items()}
    out["queries"] = len(ids)
    out["hybrid_config"] = modes["hybrid"]
    out["grid"] = {name: {"dev": mean(v["dev"]), "heldout": mean(v["heldout"]),
                          "dev_queries": len(v["dev"]), "heldout_queries": len(v["heldout"])}
                   for name, v in grid.items()}
    return out


async def locomo_recall(knowledge: Knowledge, samples: list[dict[str, Any]], k: int = 10) -> dict[str, Any]:
    """R@k on LoCoMo categories 1-4, with and without the time rerank (bench/retrieval_locomo.py)."""
    return retrieval_locomo.locomo_section(await retrieval_locomo.run(knowledge, samples, k))


async def locomo_temporal(knowledge: Knowledge, root: Any, args: Any, k: int = 10) -> dict[str, Any]:
    """R@k on LoCoMo's temporal questions (category 2), by conversation, before and after the
    time rerank; the same run as ``locomo`` (computed once per process)."""
    samples = load_locomo(getattr(args, "locomo", None) or root)[: args.locomo_conversations]
    return retrieval_locomo.temporal_section(await retrieval_locomo.run(knowledge, samples, k))


REWORDINGS = [
    ("What port does the onebox server listen on?", "Which port does the onebox server listen on?"),
    ("How do I reset my password?", "How can I reset my password?"),
    ("What is the capital of Australia?", "Which city is the capital of Australia?"),
    ("How long does the free trial last?", "How long is the free trial?"),
    ("What time does the office open on Mondays?", "When does the office open on Mondays?"),
    ("How do I cancel my subscription?", "How can I cancel my subscription?"),
    ("Who wrote the novel War and Peace?", "Who is the author of the novel War and Peace?"),
    ("What is the boiling point of water at sea level?", "At sea level, what is the boiling point of water?"),
    ("Where can I download the mobile app?", "Where do I download the mobile app?"),
    ("What are the side effects of ibuprofen?", "What side effects does ibuprofen have?"),
    ("How do I export my data to CSV?", "How can I export my data as CSV?"),
    ("Which database does onebox use?", "What database does onebox use?"),
    ("What is the refund policy for annual plans?", "What's the refund policy on annual plans?"),
    ("How many vacation days do new employees get?", "How many vacation days does a new employee get?"),
    ("Is the API rate limited?", "Does the API have a rate limit?"),
    ("What license is the project released under?", "Under which license is the project released?"),
    ("How do I enable two-factor authentication?", "How can I turn on two-factor authentication?"),
    ("What is the maximum upload size?", "What's the maximum size for an upload?"),
    ("Who is the current CEO of the company?", "Who is the company's current CEO?"),
    ("How do I change the default language?", "How can I change the default language?"),
]


async def cache_eval(knowledge: Knowledge, claims: dict[str, str]) -> dict[str, Any]:
    """False hits on near-identical SciFact claims that contradict; hits on our rewordings."""
    cache = knowledge.cache
    texts = sorted(set(claims.values()))
    vectors = await knowledge.embedder.queries(texts)
    pairs = _near_pairs(texts, vectors, cache.min_similarity)
    false_hits = unguarded = 0
    for a, b, _ in pairs:
        scope = f"bench-cache-{hash((a, b)) & 0xFFFFFFF}"
        await cache.put(texts[a], "answer", scope=scope)
        unguarded += 1
        if await cache.lookup(texts[b], scope=scope) is not None:
            false_hits += 1
    hits = 0
    for i, (question, _) in enumerate(REWORDINGS):
        await cache.put(question, f"answer {i}", scope="bench-rewordings")
    for i, (_, reworded) in enumerate(REWORDINGS):  # noqa: B007
        hit = await cache.lookup(reworded, scope="bench-rewordings")
        hits += hit is not None and hit.answer == f"answer {i}"
    return {"threshold": cache.min_similarity,
            "contradicting_pairs": len(pairs), "false_hits": false_hits,
            "would_hit_without_guard": unguarded,
            "pair_definition": "distinct claims, cosine >= threshold, 1-4 words differ",
            "rewordings": len(REWORDINGS), "reworded_hits": hits}


def _near_pairs(texts: list[str], vectors: list[list[float]], threshold: float) -> list[tuple[int, int, float]]:
    """SciFact's paired claims, found without the guard: above the similarity threshold and
    differing in 1-4 words (the dataset's claims are edited copies: negated or a number changed)."""
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float32)
    sims = matrix @ matrix.T
    out = []
    for a in range(len(texts)):
        for b in np.nonzero(sims[a, a + 1:] >= threshold)[0] + a + 1:
            diff = set(_words(texts[a])) ^ set(_words(texts[int(b)]))
            if 1 <= len(diff) <= 4:
                out.append((a, int(b), float(sims[a, b])))
    return out


def _words(text: str) -> list[str]:
    return re.findall(r"[\w'-]+", text.lower())


def scifact_docs(corpus: list[dict[str, Any]], collection: str) -> list[DocumentInput]:
    from retrieval_data import scifact_doc_text

    return [DocumentInput(d["_id"], [Section(None, scifact_doc_text(d))], collection=collection,
                          source_type="text") for d in corpus]


def cmrc_docs(corpus: list[dict[str, Any]], collection: str) -> list[DocumentInput]:
    return [DocumentInput(d["_id"], [Section(d["title"], d["text"].strip())], collection=collection,
                          source_type="text") for d in corpus]
