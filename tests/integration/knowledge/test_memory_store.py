"""Memory on the real database with the real model: dedup, supersede, isolation, archival."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from onebox.errors import ValidationError
from onebox.knowledge.archive import compact, restore
from onebox.knowledge.service import Knowledge


async def test_first_memory_of_a_new_scope_is_recallable(knowledge: Knowledge) -> None:
    made = await knowledge.memory.remember("fresh", "The staging database is called atlas.")
    assert made["deduplicated"] is False
    [hit] = await knowledge.memory.recall("fresh", "what is the staging database called?")
    assert hit.id == made["id"] and hit.scores["fused"] > 0


async def test_dedup_by_hash_and_cosine_never_returns_unrelated(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    first = await memory.remember("p", "Ana's office is in room 12.", user_id="ana")
    same = await memory.remember("p", "  Ana's office is in room 12. ", user_id="ana")
    assert same == {"id": first["id"], "deduplicated": True, "reason": "same content"}
    reworded = await memory.remember("p", "The office of Ana is room 12.", user_id="ana")
    assert reworded["id"] == first["id"] and reworded["deduplicated"] is True
    other = await memory.remember("p", "Bob prefers tea over coffee.", user_id="ana")
    assert other["deduplicated"] is False and other["id"] != first["id"]
    rows = await knowledge.db.fetch("SELECT id FROM onebox.memories WHERE scope = 'p'")
    assert len(rows) == 2


async def test_contradicting_fact_supersedes_old_one(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    old = await memory.remember("p", "Ana's office is in room 12.", user_id="ana")
    new = await memory.remember("p", "Ana's office is in room 14.", user_id="ana")
    assert new["deduplicated"] is False and new["superseded"] == [old["id"]]
    hits = await memory.recall("p", "Which room is Ana's office?", user_id="ana")
    assert [h.id for h in hits] == [new["id"]]
    row = await memory.get(old["id"])
    assert row is not None and row["invalid_at"] is not None
    assert str(row["superseded_by"]) == new["id"]
    every = await memory.recall("p", "Which room is Ana's office?", user_id="ana",
                                include_superseded=True)
    assert {h.id for h in every} == {old["id"], new["id"]}


async def test_related_but_different_statement_does_not_supersede(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    first = await memory.remember("chat", "I ran 5 km this morning before work.")
    second = await memory.remember("chat", "Yesterday I swam 20 laps at the pool after lunch.")
    assert second["superseded"] == []
    row = await memory.get(first["id"])
    assert row is not None and row["invalid_at"] is None


async def test_recall_is_isolated_per_user_and_counts_access(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    ana = await memory.remember("team", "My API token expires in March.", user_id="ana")
    await memory.remember("team", "I am allergic to peanuts.", user_id="bob")
    hits = await memory.recall("team", "when does the API token expire?", user_id="bob")
    assert all(h.id != ana["id"] for h in hits)
    assert [h.id for h in await memory.recall("team", "API token", user_id="ana")] == [ana["id"]]
    row = await memory.get(ana["id"])
    assert row is not None and row["access_count"] == 1 and row["last_accessed_at"] is not None


async def test_forget_deletes_and_checks_owner(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    made = await memory.remember("p", "The build uses Python 3.11.", user_id="ana")
    assert not await memory.forget(made["id"], user_id="bob")
    assert await memory.forget(made["id"], user_id="ana")
    assert await memory.get(made["id"]) is None
    assert await memory.recall("p", "python version", user_id="ana") == []
    with pytest.raises(ValidationError):
        await memory.forget("not-a-uuid")


async def test_compact_archives_and_restores(knowledge: Knowledge) -> None:
    memory = knowledge.memory
    facts = ["The CI runs on Debian 12.", "Deploys happen on Tuesdays.",
             "The on-call rotation changes weekly."]
    ids = [(await memory.remember("ops", f))["id"] for f in facts]
    used = await memory.remember("ops", "The VPN gateway lives in Frankfurt.")
    for _ in range(3):
        await memory.recall("ops", "VPN gateway Frankfurt", k=1)
    later = datetime.now(UTC) + timedelta(days=60)
    result = await compact(memory, scope="ops", older_than_days=30, max_access=0, now=later)
    assert result.archived == 3 and len(result.summaries) == 1
    live = {r["id"] for r in await knowledge.db.fetch("SELECT id::text FROM onebox.memories")}
    assert live == {used["id"], result.summaries[0]}
    summary = await memory.get(result.summaries[0])
    assert summary is not None and summary["kind"] == "summary"
    assert "Deploys happen on Tuesdays." in summary["content"]
    archived = await knowledge.db.fetch("SELECT id::text FROM onebox.memories_archive")
    assert {r["id"] for r in archived} == set(ids)

    assert await restore(memory, result.summaries[0]) == 3
    live = {r["id"] for r in await knowledge.db.fetch("SELECT id::text FROM onebox.memories")}
    assert live == set(ids) | {used["id"]}
    hits = await memory.recall("ops", "which day are deploys?", k=1)
    assert hits[0].content == "Deploys happen on Tuesdays."


async def test_large_scope_path_uses_index_and_still_dedups(
    knowledge: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onebox.knowledge import memory as memory_module

    monkeypatch.setattr(memory_module, "EXACT_SCAN_MAX_ROWS", 0)  # every scope counts as large
    memory = knowledge.memory
    first = await memory.remember("big", "The nightly backup runs at two in the morning.")
    again = await memory.remember("big", "The nightly backups run at two in the morning.")
    assert again == {"id": first["id"], "deduplicated": True, "reason": again["reason"]}
    await memory.remember("big", "Bob prefers tea over coffee.")
    hits = await memory.recall("big", "when does the backup run?", k=2)
    assert hits[0].id == first["id"] and len(hits) == 2
