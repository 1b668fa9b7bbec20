"""Recall on the real database favours the period a question names: a month said without a
year, before/after a date (EN and ZH), and the answer says when in words."""

from __future__ import annotations

from datetime import UTC, datetime

from onebox.knowledge.service import Knowledge

NOW = datetime(2023, 9, 1, tzinfo=UTC)


async def _trips(knowledge: Knowledge, scope: str) -> dict[str, str]:
    memory = knowledge.memory
    said = {"march": ("Ana: We hiked up the volcano in March, it was freezing.", "2023-05-08"),
            "june": ("Ana: We hiked up the volcano, it was hot and sunny.", "2023-06-20"),
            "august": ("Ana: We hiked up the volcano again, with the kids this time.", "2023-08-15")}
    return {name: (await memory.remember(scope, text, happened_at=at))["id"]
            for name, (text, at) in said.items()}


async def test_month_stated_in_the_turn_wins_for_that_month(knowledge: Knowledge) -> None:
    ids = await _trips(knowledge, "p1")
    row = await knowledge.memory.get(ids["march"])
    assert row is not None and row["happened_at"] == datetime(2023, 3, 1, tzinfo=UTC)
    assert (row["happened_precision"], row["happened_text"]) == ("month", "in March")
    hits = await knowledge.memory.recall("p1", "When did Ana hike the volcano in March 2023?",
                                         k=3, now=NOW)
    assert hits[0].id == ids["march"] and hits[0].scores["time"] > 0
    assert hits[0].when(NOW) == "in March 2023 (6 months ago)"
    assert (hits[0].to_dict()["when"] or "").startswith("in March 2023 (")


async def test_before_and_after_a_date_pick_the_right_side(knowledge: Knowledge) -> None:
    ids = await _trips(knowledge, "p2")
    before = await knowledge.memory.recall("p2", "Where did Ana hike before June 2023?", k=3, now=NOW)
    after = await knowledge.memory.recall("p2", "Where did Ana hike after July 2023?", k=3, now=NOW)
    assert before[0].id == ids["march"] and after[0].id == ids["august"]
    plain = await knowledge.memory.recall("p2", "Where did Ana hike after July 2023?", k=3,
                                          now=NOW, time_boost=False)
    assert {h.id for h in plain} == {h.id for h in after}  # the rerank reorders, never drops


async def test_chinese_period_and_relative_month(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    early = await memory.remember("zh", "我三月去了杭州看西湖。", happened_at="2023-05-08")
    late = await memory.remember("zh", "我又去了杭州看西湖，这次是和父母一起。", happened_at="2023-08-20")
    hits = await memory.recall("zh", "我在2023年6月之前去杭州做了什么？", k=2, now=NOW)
    assert hits[0].id == early["id"]
    hits = await memory.recall("zh", "我2023年7月以后去杭州做了什么？", k=2, now=NOW)
    assert hits[0].id == late["id"]


async def test_a_phrase_out_of_the_calendar_is_stored_at_the_anchor(knowledge: Knowledge) -> None:
    made = await knowledge.memory.remember("odd", "Bo: see you in 100000 years!", happened_at="2023-05-08")
    row = await knowledge.memory.get(made["id"])  # raised ValueError (year out of range) before
    assert row is not None and row["happened_at"] == datetime(2023, 5, 8, tzinfo=UTC)
    assert row["happened_text"] is None
