"""build_context: a turn's context from memory within a token budget (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from onebox.runtime.threads.context import RecalledMemory, Turn, build_context

WHEN = datetime(2026, 11, 3, tzinfo=UTC)


def turns(n: int) -> list[Turn]:
    return [Turn(i, f"message number {i} " + "word " * 40, f"answer {i}") for i in range(1, n + 1)]


def test_every_part_is_there_with_its_tokens_and_sources() -> None:
    ctx = build_context(message="where is the report?", instructions="Be brief.",
                        summary="We built a report.", summary_version=3,
                        memories=[RecalledMemory("m1", "The report is in out/r.pdf.", WHEN)],
                        recent=turns(6), files=[("out/r.pdf", 1200)], recent_turns=2)
    assert {p.name for p in ctx.parts} == {"message", "instructions", "summary", "memories",
                                          "recent", "files"}
    recent = ctx.part("recent")
    assert recent is not None and recent.sources == ("turn:5", "turn:6")
    assert recent.text.index("Turn 5") < recent.text.index("Turn 6")
    memories = ctx.part("memories")
    assert memories is not None and "(2026-11-03)\n- The report" in memories.text
    record = ctx.to_record()
    assert record["summary_version"] == 3 and record["parts"]["memories"]["sources"] == ["m1"]
    assert record["total_tokens"] == sum(p.tokens for p in ctx.parts) <= 4000
    text = ctx.render()
    assert "Be brief." not in text  # the instructions go in as the system prompt
    assert text.endswith("where is the report?")


def test_a_small_budget_keeps_the_message_and_the_newest_turn_first() -> None:
    ctx = build_context(message="and now?", summary="s " * 2000, recent=turns(10),
                        memories=[RecalledMemory(f"m{i}", "fact " * 30, WHEN) for i in range(20)],
                        budget_tokens=300)
    assert ctx.total_tokens <= 300
    recent = ctx.part("recent")
    assert recent is not None and recent.sources[-1] == "turn:10"
    assert ctx.dropped["memories"] > 0 and ctx.dropped["summary"] == 1


def test_the_context_does_not_grow_with_the_history() -> None:
    sizes = [build_context(message="hi", recent=turns(n), summary="short summary").total_tokens
             for n in (10, 100, 1000)]
    assert sizes[0] == sizes[1] == sizes[2]


def test_no_verbatim_turns_when_the_profile_asks_for_none() -> None:
    ctx = build_context(message="hi", recent=turns(3), recent_turns=0)
    assert ctx.part("recent") is None
