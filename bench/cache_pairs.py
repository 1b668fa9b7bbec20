"""The answer cache on labelled question pairs: false hits (target 0) and true hits (>= 80%).

    .venv/bin/python bench/cache_pairs.py [--pairs bench/data/cache_pairs.jsonl] [--out ...]

bench/data/cache_pairs.jsonl holds English and Chinese pairs written for this purpose
({"id", "a", "b", "lang", "label": "hit"|"miss", "kind"}). Each pair is run through the
real cache (ONEBOX_HOME's database, the configured embedding model):
- one scope per pair: put ``a``, look up ``b``;
- all questions in one scope: every ``a`` stored together, each ``b`` looked up; a hit is
  false when it returns the answer of a question not labelled the same as ``b``.
Figures are given for all pairs, per language, per kind, and for three parts: the guard
was tuned on the odd ids of the first 321 pairs, so their even ids are held out, and the
pairs marked "set": "written_after_guard" were written once the guard was done. A threshold sweep shows what the
vector threshold alone costs, and what the cache's previous rule (the contradiction
guard, still used for memory de-duplication) would have served. Only the "cache_pairs" key of bench/results/retrieval.json
is written. Timing-free, but the load average is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from onebox.config import load_settings
from onebox.knowledge.cache import AnswerCache, CacheHit, normalise_question
from onebox.knowledge.guard import contradiction, different_question
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import embedding_model_from_settings
from onebox.store.db import Database

HERE = Path(__file__).resolve().parent
SWEEP = (0.80, 0.85, 0.88, 0.90, 0.92, 0.95)
Pair = dict[str, Any]


def load_pairs(path: Path) -> list[Pair]:
    pairs = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    for pair in pairs:
        if pair.get("label") not in {"hit", "miss"} or not pair.get("a") or not pair.get("b"):
            raise SystemExit(f"{path}: pair {pair.get('id')} needs a, b and label hit|miss")
    return pairs


def same_as(pairs: list[Pair]) -> dict[str, set[str]]:
    """Each question -> the questions labelled the same as it (itself included)."""
    same: dict[str, set[str]] = defaultdict(set)
    for p in pairs:
        a, b = normalise_question(p["a"]), normalise_question(p["b"])
        same[a].add(a)
        same[b].add(b)
        if p["label"] == "hit":
            same[a].add(b)
            same[b].add(a)
    return same


async def per_pair(cache: AnswerCache, pairs: list[Pair]) -> list[Pair]:
    """One scope per pair: the outcome, the cosine and the guard's reason for each."""
    rows = []
    for p in pairs:
        scope = f"bench-pairs-{p['id']}"
        await cache.put(p["a"], f"answer {p['id']}", scope=scope)
        result = await cache.explain(p["b"], scope=scope)
        hit = isinstance(result, CacheHit)
        similarity = result.similarity if isinstance(result, CacheHit) else result.best_similarity
        rows.append({**p, "cache_hit": hit, "similarity": round(float(similarity or 0), 4),
                     "guard": different_question(p["a"], p["b"]),
                     "contradiction": contradiction(p["a"], p["b"])})
    return rows


async def one_scope(cache: AnswerCache, pairs: list[Pair]) -> dict[int, bool | None]:
    """All questions in one scope: pair id -> hit was right (True), wrong (False), none (None)."""
    same = same_as(pairs)
    for question in sorted({normalise_question(p["a"]) for p in pairs}):
        await cache.put(question, question, scope="bench-pairs-all")
    outcome: dict[int, bool | None] = {}
    for p in pairs:
        hit = await cache.lookup(p["b"], scope="bench-pairs-all")
        right = same[normalise_question(p["b"])]
        outcome[p["id"]] = None if hit is None else hit.answer in right
    return outcome


def tally(rows: list[Pair], hit_of: dict[int, bool]) -> dict[str, Any]:
    must_hit = [r for r in rows if r["label"] == "hit"]
    must_miss = [r for r in rows if r["label"] == "miss"]
    true_hits = sum(hit_of[r["id"]] for r in must_hit)
    return {"pairs": len(rows), "must_hit": len(must_hit), "must_miss": len(must_miss),
            "true_hits": true_hits,
            "true_hit_rate": round(true_hits / len(must_hit), 3) if must_hit else None,
            "false_hits": sum(hit_of[r["id"]] for r in must_miss)}


def breakdown(rows: list[Pair], hit_of: dict[int, bool]) -> dict[str, Any]:
    by_lang = {lang: tally([r for r in rows if r["lang"] == lang], hit_of)
               for lang in sorted({r["lang"] for r in rows})}
    by_kind = {f"{kind} ({label})": tally([r for r in rows if (r["kind"], r["label"]) == (kind, label)], hit_of)
               for kind, label in sorted({(r["kind"], r["label"]) for r in rows})}
    first = [r for r in rows if "set" not in r]
    halves = {"tuned_on_odd_ids": tally([r for r in first if r["id"] % 2], hit_of),
              "held_out_even_ids": tally([r for r in first if not r["id"] % 2], hit_of),
              "written_after_guard": tally([r for r in rows if r.get("set")], hit_of)}
    return {**tally(rows, hit_of), "by_language": by_lang, "by_kind": by_kind, **halves}


def one_scope_figures(rows: list[Pair], outcome: dict[int, bool | None]) -> dict[str, Any]:
    """A false hit here is any answer given for a question not labelled the same as ``b``."""
    must_hit = [r for r in rows if r["label"] == "hit"]
    wrong = [r for r in rows if outcome[r["id"]] is False]
    true_hits = sum(outcome[r["id"]] is True for r in must_hit)
    return {"pairs": len(rows), "stored_questions": len({normalise_question(r["a"]) for r in rows}),
            "true_hits": true_hits, "true_hit_rate": round(true_hits / len(must_hit), 3),
            "false_hits": len(wrong),
            "right_hits_for_must_miss_pairs": sum(
                outcome[r["id"]] is True for r in rows if r["label"] == "miss"),
            "wrong_answers": [{"id": r["id"], "b": r["b"]} for r in wrong]}


def sweep(rows: list[Pair]) -> dict[str, Any]:
    out = {}
    for threshold in SWEEP:
        above = [r for r in rows if r["similarity"] >= threshold]
        guarded = {r["id"]: r["similarity"] >= threshold and r["guard"] is None for r in rows}
        before = {r["id"]: r["similarity"] >= threshold and r["contradiction"] is None for r in rows}
        out[str(threshold)] = {
            "without_guard": {"true_hits": sum(r["label"] == "hit" for r in above),
                              "false_hits": sum(r["label"] == "miss" for r in above)},
            "with_guard": {k: v for k, v in tally(rows, guarded).items()
                           if k in ("true_hits", "false_hits")},
            "with_contradiction_guard_before": {k: v for k, v in tally(rows, before).items()
                                                if k in ("true_hits", "false_hits")}}
    return out


def failures(rows: list[Pair]) -> list[dict[str, Any]]:
    return [{"id": r["id"], "label": r["label"], "kind": r["kind"], "a": r["a"], "b": r["b"],
             "similarity": r["similarity"], "guard": r["guard"]}
            for r in rows if r["cache_hit"] != (r["label"] == "hit")]


async def run(pairs: list[Pair]) -> dict[str, Any]:
    settings = load_settings()
    db = await Database.open(settings)
    model = embedding_model_from_settings(settings)
    try:
        cache = Knowledge.build(db, model, settings).cache
        await db.fetch("DELETE FROM onebox.answer_cache WHERE scope LIKE 'bench-pairs-%%' RETURNING 1")
        rows = await per_pair(cache, pairs)
        outcome = await one_scope(cache, pairs)
        threshold = cache.min_similarity
    finally:
        await model.close()
        await db.close()
    return {
        "threshold": threshold, "embedding_model": model.name,
        "per_pair_scope": breakdown(rows, {r["id"]: r["cache_hit"] for r in rows}),
        "one_scope": one_scope_figures(rows, outcome),
        "threshold_sweep": sweep(rows),
        "failures": failures(rows),
    }


def write(result: dict[str, Any], out: Path) -> None:
    results = json.loads(out.read_text("utf-8")) if out.exists() else {}
    results["cache_pairs"] = result
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", "utf-8")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pairs", type=Path, default=HERE / "data" / "cache_pairs.jsonl")
    p.add_argument("--out", type=Path, default=HERE / "results" / "retrieval.json")
    args = p.parse_args(argv)
    pairs = load_pairs(args.pairs)
    load_before = os.getloadavg()
    result = asyncio.run(run(pairs))
    result = {"pair_set": str(args.pairs.relative_to(HERE.parent)) if args.pairs.is_relative_to(HERE.parent)
              else str(args.pairs), **result,
              "load_average_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
              "measured_at": datetime.now(UTC).isoformat(timespec="seconds")}
    write(result, args.out)
    summary = {k: result[k] for k in ("threshold", "load_average_1m")}
    summary["per_pair"] = {k: result["per_pair_scope"][k] for k in ("true_hit_rate", "false_hits")}
    summary["one_scope"] = {k: result["one_scope"][k] for k in ("true_hit_rate", "false_hits")}
    print(json.dumps(summary, ensure_ascii=False), file=sys.stdout)


if __name__ == "__main__":
    main()
