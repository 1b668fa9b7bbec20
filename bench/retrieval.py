"""Retrieval and memory benchmark: one command, JSON to bench/results/retrieval.json.

    .venv/bin/python bench/retrieval.py                        # everything, full sets
    .venv/bin/python bench/retrieval.py --only cmrc,locomo     # some sections
    .venv/bin/python bench/retrieval.py --scifact-docs 1500    # CI-sized subset
    .venv/bin/python bench/retrieval.py --only beir --beir ~/data/nfcorpus --beir ~/data/fiqa
    .venv/bin/python bench/retrieval.py --only locomo --locomo ~/data/locomo10.json

Data is read in place from --eval-data / ONEBOX_EVAL_DATA (default ../shared/eval-data);
--beir DIR (any BEIR layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv), --cmrc DIR and
--locomo FILE point a section at other data without code changes.
Everything lives in ONEBOX_HOME's database; embeddings are cached there, so a rerun only
embeds what it has not seen. Each section of the JSON says which subset it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval_data as data  # noqa: E402
import retrieval_quality as quality  # noqa: E402
import retrieval_speed as speed  # noqa: E402
from onebox.config import load_settings  # noqa: E402
from onebox.knowledge.search import SearchOptions  # noqa: E402
from onebox.knowledge.service import Knowledge  # noqa: E402
from onebox.llm.embedding import embedding_model_from_settings  # noqa: E402
from onebox.store.db import Database  # noqa: E402

SECTIONS = ("scifact", "cmrc", "locomo", "cache", "speed", "beir")
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "retrieval.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--eval-data", help="path to eval-data (default: $ONEBOX_EVAL_DATA or ../shared/eval-data)")
    p.add_argument("--only", default=",".join(SECTIONS[:5]),
                   help=f"comma list of {SECTIONS} (beir runs the --beir folders)")
    p.add_argument("--beir", action="append", default=[], type=Path, metavar="DIR",
                   help="a BEIR-layout folder to evaluate (repeatable); its name keys the JSON")
    p.add_argument("--beir-split", default="", help="qrels file stem (default: test, else the first)")
    p.add_argument("--cmrc", type=Path, metavar="DIR", help="a CMRC-style folder (default: <eval-data>/cmrc2018)")
    p.add_argument("--locomo", type=Path, metavar="FILE",
                   help="a LoCoMo-style JSON file (default: <eval-data>/locomo/locomo_dev.json)")
    p.add_argument("--scifact-docs", type=int, default=0,
                   help="index only N abstracts (all relevant ones first); 0 = all 5,183")
    p.add_argument("--scifact-queries", type=int, default=0, help="0 = every judged claim")
    p.add_argument("--cmrc-queries", type=int, default=0, help="0 = all 1,002 questions")
    p.add_argument("--locomo-conversations", type=int, default=5)
    p.add_argument("--scale-chunks", type=int, default=100_000)
    p.add_argument("--scale-base", type=int, default=800,
                   help="real passages embedded for the scale collection (the rest derived)")
    p.add_argument("--memories", type=int, default=10_000)
    p.add_argument("--memory-base", type=int, default=300,
                   help="real LoCoMo turns embedded for the memory scale scope (the rest derived)")
    p.add_argument("--speed-queries", type=int, default=60)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return p.parse_args(argv)


def _take(mapping: dict[str, Any], n: int) -> dict[str, Any]:
    return dict(list(mapping.items())[:n]) if n else mapping


async def run_scifact(k: Knowledge, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    corpus, queries, qrels = data.load_scifact(root / "scifact")
    docs = data.order_relevant_first(corpus, qrels)
    if args.scifact_docs:
        docs = docs[: args.scifact_docs]
    kept = {d["_id"] for d in docs}
    qrels = _take({q: r for q, r in qrels.items() if set(r) & kept}, args.scifact_queries)
    print(f"scifact: {len(docs)} abstracts, {len(qrels)} claims", flush=True)
    ingest = await quality.ingest(k, quality.scifact_docs(docs, "bench-scifact"))
    cutoffs = {"ndcg@10": ("ndcg", 10), "recall@10": ("recall", 10), "recall@100": ("recall", 100)}
    result = await quality.evaluate(k, "bench-scifact", queries, qrels, cutoffs)
    relevant = len({d for rels in qrels.values() for d in rels})
    subset = ("full corpus" if len(docs) == len(corpus) else
              f"subset: the {relevant} judged-relevant abstracts first, then the next "
              f"{len(docs) - relevant} in corpus order (fewer distractors than the full set)")
    return {"split": "train", "corpus_docs": len(docs), "corpus_full": len(corpus),
            "corpus": subset, "ingest": ingest, **result}


async def run_cmrc(k: Knowledge, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    corpus, queries, qrels = data.load_cmrc_sentences(args.cmrc or root / "cmrc2018")
    qrels = _take(qrels, args.cmrc_queries)
    print(f"cmrc: {len(corpus)} sentences, {len(qrels)} questions", flush=True)
    ingest = await quality.ingest(k, quality.cmrc_docs(corpus, "bench-cmrc"))
    cutoffs = {"ndcg@10": ("ndcg", 10), "recall@1": ("recall", 1), "recall@10": ("recall", 10)}
    result = await quality.evaluate(k, "bench-cmrc", queries, qrels, cutoffs)
    return {"split": "trial", "level": "sentence (article title as heading)",
            "corpus_sentences": len(corpus), "ingest": ingest, **result}


async def run_locomo(k: Knowledge, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    samples = data.load_locomo(args.locomo or root / "locomo" / "locomo_dev.json")
    samples = samples[: args.locomo_conversations]
    return await quality.locomo_recall(k, samples)  # scopes cleared there, once per process


async def run_cache(k: Knowledge, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    _, queries, _ = data.load_scifact(root / "scifact")
    await k.db.fetch("DELETE FROM onebox.answer_cache WHERE scope LIKE 'bench-%%' RETURNING 1")
    return {"claims": len(queries), **await quality.cache_eval(k, queries)}


async def run_beir(k: Knowledge, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Each --beir folder as its own collection, keyed by the folder's name."""
    out: dict[str, Any] = {}
    for folder in args.beir:
        corpus, queries, qrels, split = data.load_beir(folder, args.beir_split)
        name = folder.resolve().name
        print(f"beir {name}: {len(corpus)} documents, {len(qrels)} judged queries", flush=True)
        ingest = await quality.ingest(k, quality.scifact_docs(corpus, f"bench-beir-{name}"))
        cutoffs = {"ndcg@10": ("ndcg", 10), "recall@10": ("recall", 10), "recall@100": ("recall", 100)}
        result = await quality.evaluate(k, f"bench-beir-{name}", queries, qrels, cutoffs)
        out[name] = {"path": str(folder), "split": split, "corpus_docs": len(corpus),
                     "ingest": ingest, **result}
    if not out:
        raise SystemExit("--only beir needs at least one --beir DIR (a BEIR-layout folder)")
    return out


async def run_speed(k: Knowledge, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    corpus, claims, _ = data.load_scifact(root / "scifact")
    corpus = data.order_relevant_first(corpus, data.load_scifact(root / "scifact")[2])
    scale = await speed.build_scale_collection(k, "bench-scale", corpus, args.scale_chunks,
                                               args.scale_base)
    queries = list(claims.values())[: args.speed_queries]
    samples = data.load_locomo(args.locomo or root / "locomo" / "locomo_dev.json")
    questions = [str(qa["question"]) for s in samples for qa in s["qa"]][: args.speed_queries]
    memories = await speed.build_memories(k, "bench-memory-scale", samples, args.memories,
                                        args.memory_base)
    return {
        "search_at_scale": {**scale, **await speed.search_latency(k, "bench-scale", queries)},
        "memory_at_scale": {**memories,
                            **await speed.memory_latency(k, "bench-memory-scale", questions)},
        "embedding": await speed.embedding_throughput(k),
    }


RUNNERS = {"scifact": run_scifact, "cmrc": run_cmrc, "locomo": run_locomo,
           "cache": run_cache, "speed": run_speed, "beir": run_beir,
           "locomo_temporal": quality.locomo_temporal}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings()
    root = data.eval_root(args.eval_data)
    db = await Database.open(settings)
    model = embedding_model_from_settings(settings)
    knowledge = Knowledge.build(db, model, settings)
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    try:
        for section in [s.strip() for s in args.only.split(",") if s.strip()]:
            started = time.perf_counter()
            out = await RUNNERS[section](knowledge, root, args)
            out["run_seconds"] = round(time.perf_counter() - started, 1)
            out["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
            results[section] = out
            results["machine"] = {"cpus": _cpus(), "python": platform.python_version(),
                                  "embedding_model": model.name}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            if all("grid" in results.get(s, {}) for s in ("scifact", "cmrc")):
                shipped = SearchOptions()
                results["fusion_choice"] = quality.choose_fusion(
                    {s: results[s]["grid"] for s in ("scifact", "cmrc")},
                    {"weights": dict(shipped.weights), "method": shipped.method})
            args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
            print(json.dumps({section: out}, indent=2, ensure_ascii=False), flush=True)
    finally:
        await model.close()
        await db.close()
    return results


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
