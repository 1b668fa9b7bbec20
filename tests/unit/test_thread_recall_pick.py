"""Recalled memories in a turn's context: their share of the budget, no repeats, oldest
first (pure build_context; many long memories)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from onebox.runtime.thread_context import MEMORY_SHARE, RecalledMemory, Turn, build_context

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
    assert "(2026-01-03)\n- turn 2, verbatim: user: turn 2 says" in part.text
    assert ctx.to_record()["episodes"] == ["e2", "e5"]
