"""When a remembered fact happened: stored from the turn's date, returned, used by recall."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from onebox.errors import ValidationError
from onebox.knowledge.archive import compact, restore
from onebox.knowledge.service import Knowledge

SESSION = "1:56 pm on 8 May, 2023"


async def test_relative_phrase_is_stored_against_the_session_date(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    made = await memory.remember("t", "Caroline: I went to a LGBTQ support group yesterday.",
                                 happened_at=SESSION)
    row = await memory.get(made["id"])
    assert row is not None
    assert row["happened_at"] == datetime(2023, 5, 7, 13, 56, tzinfo=UTC)
    assert (row["happened_precision"], row["happened_text"]) == ("day", "yesterday")
    plain = await memory.remember("t", "Caroline: The support group was really moving.",
                                  metadata={"date": SESSION})
    row = await memory.get(plain["id"])
    assert row is not None and row["happened_at"] == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert (row["happened_precision"], row["happened_text"]) == ("minute", None)
    undated = await memory.remember("t", "Caroline's favourite colour is green.")
    row = await memory.get(undated["id"])
    assert row is not None and row["happened_at"] is None


async def test_chinese_phrase_and_recall_returns_the_time(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    made = await memory.remember("zh", "我去年去了日本旅行。", happened_at="2023-05-08")
    [hit] = await memory.recall("zh", "我什么时候去的日本？", now=datetime(2026, 12, 1, tzinfo=UTC))
    assert hit.id == made["id"] and hit.happened_precision == "year"
    assert hit.happened_at is not None and hit.happened_at.year == 2022
    assert hit.when(datetime(2026, 12, 1, tzinfo=UTC)) == "in 2022 (4 years ago)"
    assert hit.to_dict()["happened_at"].startswith("2022-05-08")


async def test_when_question_prefers_the_memory_that_states_a_time(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    facts = ["Melanie: Running clears my head, I love it.",
             "Melanie: The charity race for mental health was so much fun, lots of people came.",
             "Melanie: I ran a charity race for mental health last Saturday."]
    ids = [(await memory.remember("race", f, happened_at="2023-05-25"))["id"] for f in facts]
    question = "When did Melanie run a charity race?"
    plain = await memory.recall("race", question, k=3, time_boost=False)
    boosted = await memory.recall("race", question, k=3)
    assert {h.id for h in plain} == {h.id for h in boosted} == set(ids)
    assert boosted[0].id == ids[2] and boosted[0].scores["time"] > 0
    before = next(h for h in plain if h.id == ids[2]).scores["fused"]
    assert boosted[0].scores["fused"] == pytest.approx(before + boosted[0].scores["time"], abs=1e-5)
    assert boosted[0].when() is not None and "20 May 2023" in (boosted[0].when() or "")


async def test_period_in_the_query_boosts_memories_of_that_period(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    may = await memory.remember("trips", "Ana: We went hiking in the mountains.",
                                happened_at="2023-05-14")
    july = await memory.remember("trips", "Ana: We went hiking near the lake.",
                                 happened_at="2023-07-02")
    in_july = await memory.recall("trips", "Where did Ana go hiking in July 2023?", k=2)
    in_may = await memory.recall("trips", "Where did Ana go hiking in May 2023?", k=2)
    assert in_july[0].id == july["id"] and in_may[0].id == may["id"]
    relative = await memory.recall("trips", "Where did Ana go hiking last month?", k=2,
                                   now=datetime(2023, 8, 10, tzinfo=UTC))
    assert relative[0].id == july["id"]


async def test_bad_date_is_a_clear_error_naming_the_field(knowledge: Knowledge) -> None:
    with pytest.raises(ValidationError) as err:
        await knowledge.memory.remember("t", "Something happened.", happened_at="the other day")
    assert err.value.field == "happened_at" and "2023-05-08" in str(err.value)
    rows = await knowledge.db.fetch("SELECT id FROM onebox.memories WHERE scope = 't'")
    assert rows == []


async def test_compaction_keeps_the_time_and_dates_the_summary_by_it(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    a = await memory.remember("old", "Bo adopted a cat named Miso last week.", happened_at="2021-03-10")
    await memory.remember("old", "Bo repainted the kitchen blue.", happened_at="2021-04-02")
    result = await compact(memory, scope="old", older_than_days=0,
                           now=datetime(2099, 1, 1, tzinfo=UTC))
    assert result.archived == 2
    summary = await memory.get(result.summaries[0])
    assert summary is not None and "[2021-03-03]" in summary["content"]
    await restore(memory, result.summaries[0])
    back = await memory.get(a["id"])
    assert back is not None and back["happened_text"] == "last week"
    assert back["happened_at"] == datetime(2021, 3, 3, tzinfo=UTC)
