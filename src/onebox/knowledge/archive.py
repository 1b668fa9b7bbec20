"""Memory compaction: condense old, rarely used memories into summaries; keep originals restorable.

    result = await compact(store, scope="proj", older_than_days=30, max_access=1)
    await restore(store, result.summaries[0])      # originals back, summary gone

No LLM is involved: a summary is extractive (the first sentence of each
original, oldest first, with the date it happened, else the date it was stored),
stored as a memory of kind ``summary`` whose metadata lists the originals. The originals move, unchanged,
to ``onebox.memories_archive`` in the same transaction.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from onebox.knowledge.memory import MemoryStore, check_id, space_of
from onebox.knowledge.queries import sql

MAX_SUMMARY_CHARS = 2000


@dataclass
class CompactResult:
    archived: int = 0
    summaries: list[str] = field(default_factory=list)


def extractive_summary(rows: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    seen: set[str] = set()
    for row in rows:
        line = row["summary"]
        if line in seen:
            continue
        seen.add(line)
        lines.append(f"[{row.get('happened_at') or row['created_at']:%Y-%m-%d}] {line}")
    text = "\n".join(lines)
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 1] + "…"


async def compact(
    store: MemoryStore, scope: str | None = None, older_than_days: float = 30.0,
    max_access: int = 1, group_size: int = 20, now: datetime | None = None,
) -> CompactResult:
    """Archive memories older than ``older_than_days`` recalled at most ``max_access`` times."""
    before = (now or datetime.now(UTC)) - timedelta(days=older_than_days)
    rows = await store.db.fetch(sql("memory.compactable"), {
        "scope": scope, "before": before, "max_access": max_access})
    result = CompactResult()
    for (row_scope, user_id), group in itertools.groupby(
        rows, key=lambda r: (r["scope"], r["user_id"])
    ):
        members = list(group)
        for start in range(0, len(members), group_size):
            batch = members[start : start + group_size]
            if len(batch) < 2:  # a summary of one memory saves nothing
                continue
            result.summaries.append(await _condense(store, row_scope, user_id, batch))
            result.archived += len(batch)
    return result


async def _condense(
    store: MemoryStore, scope: str, user_id: str, batch: list[dict[str, Any]]
) -> str:
    ids = [r["id"] for r in batch]
    meta = {"compacted_from": [str(i) for i in ids],
            "period": [batch[0]["created_at"].isoformat(), batch[-1]["created_at"].isoformat()]}
    made = await store.remember(scope, extractive_summary(batch), user_id=user_id,
                                metadata=meta, kind="summary", auto_supersede=False)
    summary_id = made["id"]
    async with store.db.transaction() as conn:
        await conn.execute(sql("memory.archive"), {"ids": ids, "summary_id": summary_id})
        await conn.execute(sql("fts.remove_memory_terms"), {"ids": ids, "space": space_of(scope)})
        await conn.execute(sql("memory.delete_many"), {"ids": ids})
    return summary_id


async def restore(store: MemoryStore, summary_id: str) -> int:
    """Move a summary's originals back from the archive and delete the summary."""
    summary_id = check_id(summary_id, "summary_id")
    async with store.db.transaction() as conn:
        cur = await conn.execute(sql("memory.unarchive"), {"summary_id": summary_id})
        rows = await cur.fetchall()
        if not rows:
            return 0
        scope = rows[0]["scope"]
        await conn.execute(sql("fts.remove_memory_terms"),
                           {"ids": [summary_id], "space": space_of(scope)})
        await conn.execute(sql("memory.delete_many"), {"ids": [summary_id]})
        await conn.execute(sql("fts.add_memory_terms"),
                           {"ids": [r["id"] for r in rows], "space": space_of(scope)})
        await conn.execute(sql("memory.drop_archive"), {"summary_id": summary_id})
    return len(rows)
