"""LoCoMo memory recall: every conversation ingested once, every question recalled twice.

Each turn is remembered in one scope per conversation with its session date as
``happened_at`` (and in ``metadata["date"]``), indexed together with the turn before it.
Every question of categories 1-4 is recalled with ``time_boost=False`` (before) and
``time_boost=True`` (after, the shipped default), with ``now`` = the last session's date
(the questions are asked after the conversation). Turn and question embeddings are
computed in batches first (and cached in the database), so a rerun embeds nothing new.

``--only locomo`` reports R@10 overall and by category, before and after;
``--only locomo_temporal`` reports category 2 (temporal) alone, by conversation too.
Both come from the same run (computed once per process).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from onebox.knowledge.service import Knowledge
from onebox.knowledge.timeparse import parse_when
from retrieval_data import locomo_turns
from retrieval_metrics import mean

CATEGORIES = (1, 2, 3, 4)
SCOPE = "bench-locomo-"
_DONE: dict[tuple[str, ...], dict[str, Any]] = {}


def _indexed(content: str, context: str | None) -> str:
    text = " ".join(content.split())
    return f"{' '.join(context.split())}\n{text}" if context else text


def _evidence(qa: dict[str, Any]) -> set[str]:
    return set(re.findall(r"D\d+:\d+", " ".join(map(str, qa.get("evidence", [])))))


def _questions(sample: dict[str, Any]) -> list[dict[str, Any]]:
    return [qa for qa in sample["qa"] if qa.get("category") in CATEGORIES and _evidence(qa)]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def clear(knowledge: Knowledge) -> None:
    for table, column in (("memories", "scope"), ("fts_terms", "space"), ("fts_spaces", "space")):
        await knowledge.db.fetch(f"DELETE FROM onebox.{table} WHERE {column} LIKE "  # noqa: S608
                                 "'%%bench-loc%%' RETURNING 1")


def _progress() -> Callable[[int, int], None]:
    shown = [0]

    def report(done: int, total: int) -> None:
        if done == total or done - shown[0] >= 250:
            shown[0] = done
            print(f"  locomo turns embedded {done}/{total}", flush=True)
    return report


async def _embed_all(knowledge: Knowledge, samples: list[dict[str, Any]]) -> None:
    """Every turn (with its context) and every question, in batches, before any remember."""
    texts = []
    for sample in samples:
        turns = locomo_turns(sample)
        contexts = [None, *[t[2] for t in turns[:-1]]]
        texts += [_indexed(t[2], c) for t, c in zip(turns, contexts, strict=True)]
    await knowledge.embedder.passages(texts, _progress())
    await knowledge.embedder.queries([str(qa["question"]) for s in samples for qa in _questions(s)])


async def _ingest(knowledge: Knowledge, scope: str, sample: dict[str, Any]) -> dict[str, int]:
    stats = {"turns": 0, "deduplicated": 0, "superseded": 0, "turns_with_stated_time": 0}
    turns = locomo_turns(sample)
    contexts = [None, *[t[2] for t in turns[:-1]]]
    for (dia_id, date, content), context in zip(turns, contexts, strict=True):
        made = await knowledge.memory.remember(
            scope, content, metadata={"dia_id": dia_id, "date": date}, context=context,
            happened_at=date or None)
        stats["turns"] += 1
        stats["deduplicated"] += bool(made["deduplicated"])
        stats["superseded"] += len(made.get("superseded", []))
        if not made["deduplicated"]:
            row = await knowledge.memory.get(made["id"])
            stats["turns_with_stated_time"] += bool(row and row["happened_text"])
    return stats


async def _score(knowledge: Knowledge, scope: str, sample: dict[str, Any], k: int) -> list[dict[str, Any]]:
    last_date = [t[1] for t in locomo_turns(sample) if t[1]][-1]
    now = parse_when(last_date).at + timedelta(days=1)
    out = []
    for qa in _questions(sample):
        evidence, row = _evidence(qa), {"category": qa["category"]}
        for name, boost in (("before", False), ("after", True)):
            hits = await knowledge.memory.recall(scope, str(qa["question"]), k=k,
                                                 time_boost=boost, now=now)
            row[name] = len({h.metadata.get("dia_id") for h in hits} & evidence) / len(evidence)
        out.append(row)
    return out


async def run(knowledge: Knowledge, samples: list[dict[str, Any]], k: int = 10) -> dict[str, Any]:
    """Ingest and score every conversation once per process; both sections read the result."""
    key = tuple(str(s.get("sample_id", i)) for i, s in enumerate(samples))
    if key in _DONE:
        return _DONE[key]
    load_start = _load()
    await clear(knowledge)
    await _embed_all(knowledge, samples)
    conversations, totals = [], {"turns": 0, "deduplicated": 0, "superseded": 0,
                                 "turns_with_stated_time": 0}
    for i, sample in enumerate(samples):
        stats = await _ingest(knowledge, f"{SCOPE}{i}", sample)
        totals = {n: totals[n] + stats[n] for n in totals}
        rows = await _score(knowledge, f"{SCOPE}{i}", sample, k)
        conversations.append({"sample_id": key[i], "rows": rows, **stats})
        print(f"  locomo conversation {i + 1}/{len(samples)} done", flush=True)
    _DONE[key] = {"k": k, "conversations": conversations, "totals": totals,
                  "load_average_1_5_15m": {"start": load_start, "end": _load()}}
    return _DONE[key]


def _recall(rows: Iterable[dict[str, Any]], name: str) -> float:
    return mean([r[name] for r in rows])


def locomo_section(result: dict[str, Any]) -> dict[str, Any]:
    """R@k overall and by category, with the time rerank (shipped) and without it."""
    rows = [r for c in result["conversations"] for r in c["rows"]]
    k = result["k"]

    def by_category(name: str) -> dict[str, Any]:
        cats = sorted({r["category"] for r in rows})
        return {str(c): {"recall": _recall((r for r in rows if r["category"] == c), name),
                         "n": sum(r["category"] == c for r in rows)} for c in cats}

    return {"conversations": len(result["conversations"]), "categories": list(CATEGORIES),
            f"recall@{k}": _recall(rows, "after"), "questions": len(rows),
            "by_category": by_category("after"),
            "without_time_rerank": {f"recall@{k}": _recall(rows, "before"),
                                    "by_category": by_category("before")},
            **result["totals"], "load_average_1_5_15m": result["load_average_1_5_15m"]}


def temporal_section(result: dict[str, Any]) -> dict[str, Any]:
    """Category 2 (temporal) alone, overall and by conversation, before and after."""
    k = result["k"]
    per = []
    for conv in result["conversations"]:
        rows = [r for r in conv["rows"] if r["category"] == 2]
        per.append({"sample_id": conv["sample_id"], "questions": len(rows),
                    f"recall@{k}_before": _recall(rows, "before"),
                    f"recall@{k}_after": _recall(rows, "after"),
                    "turns": conv["turns"], "turns_with_stated_time": conv["turns_with_stated_time"]})
    rows = [r for c in result["conversations"] for r in c["rows"] if r["category"] == 2]
    return {"conversations": len(per), "category": 2, "questions": len(rows),
            f"recall@{k}_before": _recall(rows, "before"), f"recall@{k}_after": _recall(rows, "after"),
            "by_conversation": per, "turns_with_stated_time": result["totals"]["turns_with_stated_time"],
            "load_average_1_5_15m": result["load_average_1_5_15m"]}
