"""Semantic answer cache with the real model: threshold, contradiction guard, hits, TTL."""

from __future__ import annotations

import asyncio

from onebox.knowledge.cache import CacheMiss
from onebox.knowledge.service import Knowledge

CLAIM = "0-dimensional biomaterials lack inductive properties."


async def test_negated_claim_does_not_hit(knowledge: Knowledge) -> None:
    cache = knowledge.cache
    await cache.put(CLAIM, "answer about lacking")
    miss = await cache.explain("0-dimensional biomaterials show inductive properties.")
    assert isinstance(miss, CacheMiss)
    # similar enough to pass the threshold: only the guard refuses it
    assert miss.best_similarity is not None and miss.best_similarity >= cache.min_similarity
    assert miss.refused_by_guard == "negation differs"


async def test_number_change_does_not_hit(knowledge: Knowledge) -> None:
    cache = knowledge.cache
    await cache.put("1 in 5 million in UK have abnormal PrP positivity.", "a")
    assert await cache.lookup("1 in 2,000 in UK have abnormal PrP positivity.") is None


async def test_reworded_question_hits_and_counts(knowledge: Knowledge) -> None:
    cache = knowledge.cache
    await cache.put("What port does the onebox server listen on?", "8080")
    first = await cache.lookup("Which port does the onebox server listen on?")
    assert first is not None and first.answer == "8080" and first.hit_count == 1
    second = await cache.lookup("what port does the onebox server listen on")
    assert second is not None and second.hit_count == 2
    assert await cache.lookup("How much memory does the onebox server need?") is None


async def test_expired_entry_does_not_hit(knowledge: Knowledge) -> None:
    cache = knowledge.cache
    await cache.put("What is the capital of France?", "Paris", ttl_s=0.05)
    await asyncio.sleep(0.2)
    assert await cache.lookup("What is the capital of France?") is None
