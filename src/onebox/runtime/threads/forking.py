"""Forking a thread at a turn: the conversation as it was before that turn, going on anew.

    forked = await fork_thread(db, settings, knowledge, "default", thread_id, turn=3,
                               message="and in euros?", profile="other")

The fork is a new thread of the tenant. Its turns before ``turn`` are the parent's (the
same runs, messages and answers: nothing is asked again), its memory holds the facts and
episodes those turns left (copied into its own scope; a fact a later turn superseded is
current again), its summary is the one the upkeep wrote after its last copied turn, and its
workspace is the parent's thread session as it was when ``turn`` was posted (the stored
snapshot's objects, not a copy). Turn ``turn`` is then posted in the fork: the parent's
message, or ``message``, under the parent's profile or ``profile``. Later turns of either
thread never see the other's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from psycopg.types.json import Jsonb

from onebox.config import Settings
from onebox.errors import Conflict, ValidationError
from onebox.knowledge.collections import tenant_name
from onebox.knowledge.service import Knowledge
from onebox.runtime.threads.service import (
    ENDED,
    MAX_TITLE_CHARS,
    Posted,
    Thread,
    check_message,
    create_thread,
    get_thread,
    post_message,
    thread_turns,
)
from onebox.store import snapshots as snapshot_rows
from onebox.store.db import Database
from onebox.store.queries import load_queries

Q = load_queries("threads")


@dataclass(frozen=True)
class ForkedThread:
    thread: Thread
    copied_turns: int
    memories: int
    posted: Posted | None


async def fork_thread(
    db: Database, settings: Settings, knowledge: Knowledge, tenant_id: str,
    thread_id: uuid.UUID, *, turn: int, message: str | None = None,
    profile: str | None = None, post: bool = True,
) -> ForkedThread:
    """A new thread holding the parent's conversation before ``turn`` (see the module), with
    turn ``turn`` posted in it unless ``post`` is false."""
    parent = await get_thread(db, tenant_id, thread_id)
    turns = await thread_turns(db, tenant_id, thread_id)
    by_number = {t["turn"]: t for t in turns}
    if turn not in by_number:
        raise ValidationError(f"thread {thread_id} has no turn {turn}: it has turns 1 to "
                              f"{parent.turns}", field="turn")
    busy = [t["turn"] for t in turns if t["turn"] < turn and t["status"] not in ENDED]
    if busy:
        raise Conflict(f"turn {busy[0]} of thread {thread_id} is still running: fork once "
                       "the turns before the fork point have ended", field="turn")
    text = check_message(message if message is not None else by_number[turn]["message"])
    title = f"{parent.title or 'thread'} (fork at turn {turn})"[:MAX_TITLE_CHARS]
    child = await create_thread(db, settings, tenant_id, title=title,
                                profile=profile if profile is not None else parent.profile)
    forked_at = by_number[turn]["created_at"]
    async with db.transaction() as conn:
        await conn.execute(Q["fork_turns"], {"to": child.id, "from": parent.id, "turn": turn})
        cur = await conn.execute(Q["summary_after"], {"thread_id": parent.id,
                                                      "turn": turn - 1})
        summary = await cur.fetchone()
        cur = await conn.execute(Q["copy_memories"], {
            "from_scope": tenant_name(tenant_id, parent.memory_scope),
            "to_scope": tenant_name(tenant_id, child.memory_scope), "turn": turn,
            "before": forked_at})
        copied = len(await cur.fetchall())
        cur = await conn.execute(Q["head_before"], {"session_id": parent.session_id,
                                                    "before": forked_at})
        head = await cur.fetchone()
        if head is not None:
            await snapshot_rows.copy_as_head(conn, child.session_id, head["id"])
        cur = await conn.execute(Q["set_fork_state"], {
            "id": child.id, "summary": summary["summary"] if summary else "",
            "summary_version": summary["turn"] if summary else 0,
            "summarized_turns": summary["turn"] if summary else 0, "turns": turn - 1,
            "origin": Jsonb({"thread_id": str(parent.id), "turn": turn})})
        row = await cur.fetchone()
    assert row is not None
    forked = Thread.of(row)
    posted = (await post_message(db, settings, knowledge, tenant_id, forked.id, text)
              if post else None)
    return ForkedThread(forked, turn - 1, copied, posted)
