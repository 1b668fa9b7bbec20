"""Answer cache lookup latency with 10,000 cached questions (target: p95 under 30 ms).

    .venv/bin/python bench/cache_speed.py [--entries 10000] [--queries 200] [--out ...]

Questions are generated from templates (English and Chinese, many subjects and attributes,
so near neighbours exist for every query) and stored in one scope; then each query is
looked up with ``AnswerCache.explain``: half are rewordings of a stored question (the
guard reads both and pairs their differing words), half ask another attribute of a stored
subject (close vectors, refused by the guard). Timed end to end (the query's vector removed
from the embedding cache first, so it is embedded afresh; until round 8 a number was added
to the text instead, which the guard refused at once as "numbers differ", so that figure
left out the word pairing) and again with the query vector cached. WordNet, jieba, Cilin and the
rewording model are loaded before timing (a process pays that once, at its first lookup:
about 2 s, and 5 s more where the rewording model is not built yet). Writes the
"cache_speed" key of bench/results/retrieval.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from onebox.config import load_settings
from onebox.knowledge import word_sense
from onebox.knowledge.cache import CacheHit
from onebox.knowledge.embedder import content_hash
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import embedding_model_from_settings
from onebox.store.db import Database

HERE = Path(__file__).resolve().parent
SCOPE = "bench-cache-speed"
SUBJECTS_EN = ["Austria", "Brazil", "Canada", "Denmark", "Egypt", "Finland", "Ghana", "Hungary", "India", "Japan", "Kenya", "Laos", "Mexico", "Nepal", "Oman", "Peru", "Qatar", "Rwanda", "Spain", "Togo", "Uganda", "Vietnam", "Yemen", "Zambia"]
ATTRS_EN = ("population", "area", "capital", "currency", "national anthem", "highest mountain",
            "longest river", "official language", "largest city", "president", "flag colour",
            "main export", "calling code", "time zone", "national dish", "founding year")
FORMS_EN = ("What is the {a} of {s}?", "Could you tell me the {a} of {s}?",
            "What's {s}'s {a}?", "Which is the {a} of {s}?")
SUBJECTS_ZH = ["北京", "上海", "广州", "深圳", "杭州", "南京", "成都", "武汉", "西安", "重庆", "天津", "苏州", "长沙", "郑州", "青岛", "大连", "厦门", "昆明", "沈阳", "哈尔滨", "济南", "福州", "合肥", "南昌"]
ATTRS_ZH = ("人口", "面积", "市长", "邮政编码", "区号", "最高建筑", "主要产业", "著名景点", "机场",
            "火车站", "大学数量", "年平均气温", "市花", "方言", "特色小吃", "建城时间")
FORMS_ZH = ("{s}的{a}是什么？", "请问{s}的{a}是什么？", "{s}的{a}是哪个？", "{s}{a}是什么？")


def questions(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct questions: every subject x attribute x form, numbered beyond that."""
    out = [f.format(a=a, s=s) for s in SUBJECTS_EN for a in ATTRS_EN for f in FORMS_EN[:2]]
    out += [f.format(a=a, s=s) for s in SUBJECTS_ZH for a in ATTRS_ZH for f in FORMS_ZH[:2]]
    extra, k = [], 0
    while len(out) + len(extra) < n:
        s, a = SUBJECTS_EN[k % len(SUBJECTS_EN)], ATTRS_EN[(k // 7) % len(ATTRS_EN)]
        extra.append(f"What was the {a} of {s} in {1800 + k % 220}?")
        k += 1
    random.Random(seed).shuffle(extra)
    return (out + extra)[:n]


def lookups(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 2 == 0:  # a rewording of a stored question
            out.append(rng.choice(FORMS_EN[2:]).format(a=rng.choice(ATTRS_EN), s=rng.choice(SUBJECTS_EN))
                       if i % 4 == 0 else
                       rng.choice(FORMS_ZH[2:]).format(a=rng.choice(ATTRS_ZH), s=rng.choice(SUBJECTS_ZH)))
        else:  # another attribute, a neighbour only
            out.append(f"What is the average rainfall of {rng.choice(SUBJECTS_EN)}?" if i % 4 == 1
                       else f"{rng.choice(SUBJECTS_ZH)}的降水量是什么？")
    return out


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1)


async def run(entries: int, queries: int) -> dict[str, Any]:
    settings = load_settings()
    db = await Database.open(settings)
    model = embedding_model_from_settings(settings)
    try:
        cache = Knowledge.build(db, model, settings).cache
        await db.fetch("DELETE FROM onebox.answer_cache WHERE scope = %(s)s RETURNING 1",
                       {"s": SCOPE})
        stored = questions(entries)
        started = time.perf_counter()
        await cache.embedder.queries(stored)
        for q in stored:
            await cache.put(q, f"answer to {q}", scope=SCOPE)
        fill_s = time.perf_counter() - started
        await asyncio.to_thread(word_sense.warm)
        judge = cache.rewording_judge()  # opened (built at its first use) before timing
        if judge is not None:
            await asyncio.to_thread(judge.score, "warm", "warm")
        asked = lookups(queries)
        fresh, cached, hits = [], [], 0
        for q in asked:
            await db.fetch(  # embedded afresh: a text the embedding cache has not seen
                "DELETE FROM onebox.embedding_cache WHERE model = %(m)s AND kind = 'query' "
                "AND content_hash = %(h)s RETURNING 1", {"m": model.name, "h": content_hash(q)})
            t = time.perf_counter()
            await cache.explain(q, scope=SCOPE)
            fresh.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            found = await cache.explain(q, scope=SCOPE)
            cached.append((time.perf_counter() - t) * 1000)
            hits += isinstance(found, CacheHit)
        await db.fetch("DELETE FROM onebox.answer_cache WHERE scope = %(s)s RETURNING 1",
                       {"s": SCOPE})
    finally:
        await model.close()
        await db.close()
    return {"entries": entries, "queries": queries, "hits": hits, "fill_seconds": round(fill_s, 1),
            "end_to_end_p50_ms": pct(fresh, 50), "end_to_end_p95_ms": pct(fresh, 95),
            "query_vector_cached_p50_ms": pct(cached, 50),
            "query_vector_cached_p95_ms": pct(cached, 95), "embedding_model": model.name}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--entries", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--out", type=Path, default=HERE / "results" / "retrieval.json")
    args = p.parse_args()
    load = os.getloadavg()[0]
    result = asyncio.run(run(args.entries, args.queries))
    result.update(load_average_1m=[round(load, 2), round(os.getloadavg()[0], 2)],
                  measured_at=datetime.now(UTC).isoformat(timespec="seconds"))
    results = json.loads(args.out.read_text("utf-8")) if args.out.exists() else {}
    results["cache_speed"] = result
    args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", "utf-8")
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
