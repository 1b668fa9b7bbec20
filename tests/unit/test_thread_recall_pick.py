"""Recalled memories in a turn's context: their share of the budget, no repeats, oldest
first (pure build_context; many long memories)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from onebox.llm.embedding import estimate_tokens
from onebox.runtime.threads.context import MEMORY_SHARE, RecalledMemory, Turn, build_context

START = datetime(2026, 1, 1, tzinfo=UTC)


def episode(n: int, words: int = 80) -> RecalledMemory:
    return RecalledMemory(f"e{n}", f"user: turn {n} says " + "word " * words,
                          START + timedelta(days=n), n, episode=True)


def test_many_long_memories_never_exceed_their_share_nor_the_budget() -> None:
    memories = [episode(n, words=10 + 7 * (n % 40)) for n in range(300, 0, -1)]
    for budget in (200, 333, 1000, 4000, 20_000):
        ctx = build_context(message="what did I say? " * 5, summary="s " * 500,
                            recent=[Turn(i, "m " * 50, "a " * 50) for i in range(301, 306)],
                            memories=memories, budget_tokens=budget)
        part = ctx.part("memories")
        assert ctx.total_tokens <= budget
        assert part is None or part.tokens <= int(budget * MEMORY_SHARE)
        assert ctx.dropped["memories"] > 0


def test_repeats_are_left_out_and_the_rest_listed_oldest_first() -> None:
    fact_of_told_turn = RecalledMemory("f2", "The user likes tea.", START, 2)
    ranked = [episode(5, 5), episode(2, 5), fact_of_told_turn,
              RecalledMemory("f9", "The user has a cat.", START, 9),
              RecalledMemory("d9", "the user  has a CAT.", START, 7),  # the same text again
              episode(8, 5)]  # turn 8 is verbatim in the recent turns already
    ctx = build_context(message="hi", memories=ranked, recent=[Turn(8, "hello", "hi")])
    part = ctx.part("memories")
    assert part is not None and part.sources == ("f9", "e2", "e5")  # by date, then turn
    assert ctx.episodes == ("e2", "e5")
    assert "(2026-01-03)\n- turn 2: user: turn 2 says" in part.text
    assert ctx.to_record()["episodes"] == ["e2", "e5"]


def test_a_turn_is_told_once_by_its_best_ranked_kind() -> None:
    fact_3a = RecalledMemory("f3a", "The user moved to Lyon.", START, 3)
    fact_3b = RecalledMemory("f3b", "The user works at a bakery.", START, 3)
    ranked = [fact_3a, episode(3, 5), episode(4, 5),
              RecalledMemory("f4", "The user has a dog.", START, 4), fact_3b]
    ctx = build_context(message="hi", memories=ranked)
    part = ctx.part("memories")
    # turn 3 by its facts (both: each says something else), turn 4 by its words
    assert part is not None and set(part.sources) == {"f3a", "f3b", "e4"}
    assert ctx.episodes == ("e4",)
    # before: the episode after its fact went in too (and left the later fact out)
    both = build_context(message="hi", memories=ranked, turn_once=False)
    assert set(both.part("memories").sources) == {"f3a", "e3", "e4"}  # type: ignore[union-attr]


def on_day(n: int, day: int, words: int = 5) -> RecalledMemory:
    return RecalledMemory(f"e{n}", f"user: turn {n} says " + "word " * words,
                          START + timedelta(days=day), n, episode=True)


def test_per_day_takes_two_turns_of_a_day_first_then_fills_with_the_rest() -> None:
    ranked = [on_day(1, 0), on_day(2, 0), on_day(3, 0), on_day(4, 5), on_day(5, 9)]
    fact_of_1 = RecalledMemory("f1", "The user rides a bike.", START, 1)  # its episode is in
    ctx = build_context(message="hi", memories=[*ranked[:3], fact_of_1, *ranked[3:]],
                        memory_tokens=10_000, per_day=2)
    part = ctx.part("memories")
    assert part is not None and set(part.sources) == {"e1", "e2", "e3", "e4", "e5"}
    tight = sum(estimate_tokens(t) + 1 for t in ("(2026-01-01)", "(2026-01-06)", "(2026-01-10)"))
    tight += sum(estimate_tokens(f"- turn {m.turn}: {m.content}") + 1
                 for m in (ranked[0], ranked[1], ranked[3], ranked[4]))
    squeezed = build_context(message="hi", memories=ranked, memory_tokens=tight, per_day=2)
    shown = squeezed.part("memories")
    assert shown is not None and shown.sources == ("e1", "e2", "e4", "e5")  # e3 waited
    unlimited = build_context(message="hi", memories=ranked, memory_tokens=tight)
    assert unlimited.part("memories").sources == ("e1", "e2", "e3", "e4")  # type: ignore[union-attr]


def test_per_day_never_exceeds_the_share_nor_repeats_a_memory() -> None:
    memories = [on_day(n, n % 7, words=10 + 7 * (n % 40)) for n in range(300, 0, -1)]
    memories += memories[:50]  # the same memories recalled twice
    for budget in (200, 1000, 4000, 20_000):
        ctx = build_context(message="what did I say?", memories=memories, budget_tokens=budget,
                            per_day=2)
        part = ctx.part("memories")
        assert ctx.total_tokens <= budget
        assert part is None or (part.tokens <= int(budget * MEMORY_SHARE)
                                and len(set(part.sources)) == len(part.sources))
