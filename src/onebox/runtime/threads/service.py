"""Threads: conversations of many turns, each turn a task run of the thread on the one engine.

A thread belongs to a tenant and keeps one sandbox session (``thread-<id>``): every turn's
steps run in it, so a file written in turn 1 is there in turn 2 (the workspace is
snapshotted after every step like any run's, and restored from its newest snapshot when a
later turn finds it gone). A turn's task is the context built for its message
(:func:`onebox.runtime.threads.context.build_context`: the summary, the memories recalled for
the message with their dates, the last turns, the files), not the whole history; what went
into it is stored per turn (``thread_turns.context``) and as the run's ``thread_context``
event, which ``onebox explain RUN`` shows. When a turn's agent finishes, its run takes two
more durable steps before it ends: its facts go into the thread's memory scope and the
summary is updated (:mod:`onebox.runtime.threads.steps`, :mod:`onebox.runtime.threads.upkeep`),
on a worker serving the model; posting a message calls no model.

    thread = await threads.create_thread(db, settings, "default", title="sales")
    posted = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                        "load sales.csv and keep the totals in totals.txt")
    # posted.run_id is an ordinary run: logs, events, explain, files
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from onebox.config import Settings
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.knowledge.collections import tenant_name
from onebox.knowledge.service import Knowledge
from onebox.runtime.agent import engine as agent_engine
from onebox.runtime.engine.submit import insert_run
from onebox.runtime.models.profiles import get_profile, run_profile
from onebox.runtime.threads.context import (
    DEFAULT_BUDGET_TOKENS,
    MEMORY_SHARE,
    RECENT_TURNS,
    Context,
    RecalledMemory,
    Turn,
    build_context,
)
from onebox.store import runs as store
from onebox.store.db import Database
from onebox.store.queries import load_queries

Q = load_queries("threads")
MAX_MESSAGE_CHARS = 100_000
MAX_TITLE_CHARS = 200
MIN_MEMORY_TOKENS = 20  # a short fact with its date: recall k = memory budget / this
MAX_RECALL_K = 100
FOLLOW_UP_CHARS = 300  # of the previous turn's message, added to the recall query
MAX_RECENT_TURNS = 50  # the most a profile's context_turns asks for
ENDED = frozenset(store.TERMINAL_RUN_STATES)


@dataclass(frozen=True)
class Thread:
    id: uuid.UUID
    tenant_id: str
    title: str
    profile: str | None
    session_id: str
    summary: str
    summary_version: int
    turns: int
    created_at: datetime
    updated_at: datetime
    forked_from: dict[str, Any] | None = None  # {"thread_id", "turn"} of a fork

    @classmethod
    def of(cls, row: dict[str, Any]) -> Thread:
        return cls(**{k: row[k] for k in cls.__dataclass_fields__ if k in row})

    @property
    def memory_scope(self) -> str:
        """The scope (as the tenant names it) the thread's facts are remembered in."""
        return f"thread-{self.id}"

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__},
                "memory_scope": self.memory_scope}


@dataclass(frozen=True)
class RecallOptions:
    """How a turn recalls: memories take ``memory_share`` of the budget (recall k follows
    from it, or ``fixed_k``); episodes (turns verbatim) or facts only; the query is the
    message, plus the previous turn's message when ``follow_up``; ``per_day``: at most that
    many turns of one day go in before the rest (:func:`thread_context.pick_memories`);
    ``neighbours``: a recalled episode brings the turn just before it (ranked right after
    it, within the same share); ``turn_once``: a turn's episode or its facts, not both. A
    profile's ``context_memory_share`` takes the place of ``memory_share``."""

    memory_share: float = MEMORY_SHARE
    fixed_k: int | None = None
    episodes: bool = True
    follow_up: bool = False
    per_day: int | None = None
    neighbours: bool = False
    turn_once: bool = True

    def recall_k(self, memory_tokens: int) -> int:
        if self.fixed_k is not None:
            return self.fixed_k
        return max(8, min(MAX_RECALL_K, memory_tokens // MIN_MEMORY_TOKENS))


@dataclass(frozen=True)
class Posted:
    """A turn that was submitted: its run (an ordinary run) and the context it got."""

    thread_id: uuid.UUID
    turn: int
    run_id: uuid.UUID
    context: Context


def parse_thread_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValidationError(f"thread id {value!r} is not a UUID; `onebox thread list` shows "
                              "the threads", field="thread_id") from None


async def _one(conn: store.Conn, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
    cur = await conn.execute(Q[name], params)
    row: dict[str, Any] | None = await cur.fetchone()
    return row


async def _all(conn: store.Conn, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = await conn.execute(Q[name], params)
    return list(await cur.fetchall())


async def create_thread(db: Database, settings: Settings, tenant_id: str, *, title: str = "",
                        profile: str | None = None) -> Thread:
    """A new thread of the tenant; ``profile`` (a stored profile's name) must exist."""
    if len(title) > MAX_TITLE_CHARS:
        raise ValidationError(f"title is {len(title)} characters; at most {MAX_TITLE_CHARS}",
                              field="title")
    thread_id = uuid.uuid4()
    async with db.transaction() as conn:
        if profile is not None:
            await get_profile(conn, tenant_id, profile)
        row = await _one(conn, "insert_thread", {
            "id": thread_id, "tenant_id": tenant_id, "title": title.strip(),
            "profile": profile, "session_id": f"thread-{thread_id}"})
    assert row is not None
    return Thread.of(row)


async def get_thread(db: Database, tenant_id: str, thread_id: uuid.UUID) -> Thread:
    """The tenant's thread, or NotFound (another tenant's thread does not exist for it)."""
    async with db.connection() as conn:
        row = await _one(conn, "get_thread", {"id": thread_id, "tenant_id": tenant_id})
    if row is None:
        raise NotFound(f"thread {thread_id} does not exist; `onebox thread list` shows the "
                       "threads", field="thread_id")
    return Thread.of(row)


async def list_threads(db: Database, tenant_id: str, *, limit: int = 100) -> list[Thread]:
    async with db.connection() as conn:
        rows = await _all(conn, "list_threads", {"tenant_id": tenant_id, "limit": limit})
    return [Thread.of(r) for r in rows]


async def thread_turns(db: Database, tenant_id: str, thread_id: uuid.UUID, *, after: int = 0,
                       limit: int = 500) -> list[dict[str, Any]]:
    """The thread's turns (after turn ``after``): message, run, status, answer, context."""
    await get_thread(db, tenant_id, thread_id)
    async with db.connection() as conn:
        return await _all(conn, "thread_turns", {"thread_id": thread_id, "after": after,
                                                 "limit": limit})


async def show_thread(db: Database, tenant_id: str, thread_id: uuid.UUID) -> dict[str, Any]:
    thread = await get_thread(db, tenant_id, thread_id)
    return {"thread": thread.to_dict(),
            "turns": await thread_turns(db, tenant_id, thread_id)}


async def remove_thread(db: Database, knowledge: Knowledge, tenant_id: str,
                        thread_id: uuid.UUID) -> int:
    """Delete the thread, its turns and its memories (its runs stay, like any run);
    returns how many memories were forgotten."""
    thread = await get_thread(db, tenant_id, thread_id)
    async with db.transaction() as conn:
        if await _one(conn, "delete_thread", {"id": thread_id, "tenant_id": tenant_id}) is None:
            raise NotFound(f"thread {thread_id} does not exist", field="thread_id")
    scope = tenant_name(tenant_id, thread.memory_scope)
    async with db.connection() as conn:
        ids = [r["id"] for r in await _all(conn, "thread_memories", {"scope": scope})]
    forgotten = [await knowledge.memory.forget(str(i), scope_prefix=scope) for i in ids]
    return sum(forgotten)


def check_message(message: str) -> str:
    text = (message or "").strip()
    if not text:
        raise ValidationError("the message is empty; say something to the agent",
                              field="message")
    if len(text) > MAX_MESSAGE_CHARS:
        raise ValidationError(f"the message is {len(text)} characters; at most "
                              f"{MAX_MESSAGE_CHARS} (put long text in a file)", field="message")
    return text


async def post_message(
    db: Database, settings: Settings, knowledge: Knowledge, tenant_id: str,
    thread_id: uuid.UUID, message: str,
) -> Posted:
    """Submit the next turn: build its context and queue its run in the thread's session.
    No model is called here (the earlier turns' facts and summary were taken by their own
    runs' upkeep steps). Conflict while the previous turn (upkeep included) still runs."""
    text = check_message(message)
    thread = await get_thread(db, tenant_id, thread_id)
    await _require_idle(db, thread)
    context = await gather_context(db, knowledge, thread, text)
    return await _submit_turn(db, settings, thread, text, context)


async def unfinished_turn(db: Database, thread: Thread) -> dict[str, Any] | None:
    """The thread's last turn (turn, run_id, status, ...) while its run has not ended
    (upkeep included); None when the thread may take a message."""
    async with db.connection() as conn:
        last = await _all(conn, "recent_turns", {"thread_id": thread.id, "limit": 1})
    return last[0] if last and last[0]["status"] not in ENDED else None


async def _require_idle(db: Database, thread: Thread) -> None:
    if (last := await unfinished_turn(db, thread)) is not None:
        raise Conflict(f"turn {last['turn']} of thread {thread.id} is still running; wait "
                       "for its answer (or cancel its run) before the next message",
                       field="message")


async def gather_context(db: Database, knowledge: Knowledge, thread: Thread, message: str,
                         options: RecallOptions = RecallOptions()) -> Context:
    """The inputs of :func:`build_context` for the thread, read from the database."""
    async with db.connection() as conn:
        profile = await _profile_spec(conn, thread)
        recent = await _all(conn, "recent_turns", {"thread_id": thread.id,
                                                   "limit": MAX_RECENT_TURNS})
        files = await _all(conn, "thread_files", {"thread_id": thread.id, "limit": 200})
        behind = [r["turn"] for r in await _all(conn, "turns_behind", {"thread_id": thread.id})]
    budget = int(profile.get("context_tokens") or DEFAULT_BUDGET_TOKENS)
    share = profile.get("context_memory_share")
    memory_tokens = int(budget * (options.memory_share if share is None else float(share)))
    query = recall_query(message, recent[0]["message"] if recent and options.follow_up
                         else None)
    memories = await recall_memories(knowledge, thread, query,
                                     options.recall_k(memory_tokens), options.episodes)
    if options.neighbours:
        memories = await with_neighbours(db, thread, memories)
    return build_context(
        message=message, instructions=str(profile.get("instructions") or ""),
        summary=summary_with_gaps(thread.summary, behind),
        summary_version=thread.summary_version, memories=memories,
        recent=[Turn(r["turn"], r["message"], r["answer"]) for r in reversed(recent)],
        files=[(f["path"], f["size"]) for f in files], budget_tokens=budget,
        recent_turns=RECENT_TURNS if profile.get("context_turns") is None
        else int(profile["context_turns"]), memory_tokens=memory_tokens,
        per_day=options.per_day, turn_once=options.turn_once)


def recall_query(message: str, previous: str | None) -> str:
    """The recall query: the message, after the previous turn's message (a follow-up such
    as "and the second one?" is read with what it follows)."""
    if not previous:
        return message
    return f"{previous.strip()[:FOLLOW_UP_CHARS]}\n{message}"


async def recall_memories(knowledge: Knowledge, thread: Thread, query: str, k: int,
                          episodes: bool = True) -> list[RecalledMemory]:
    """The thread's memories for the query, best first (facts only: episodes left out)."""
    hits = await knowledge.memory.recall(tenant_name(thread.tenant_id, thread.memory_scope),
                                         query, k=k if episodes else 3 * k)
    found = [RecalledMemory(h.id, h.content, h.valid_from, _turn_of(h.metadata),
                            bool(h.metadata.get("episode"))) for h in hits]
    return found if episodes else [m for m in found if not m.episode][:k]


async def with_neighbours(db: Database, thread: Thread,
                          memories: list[RecalledMemory]) -> list[RecalledMemory]:
    """The recalled memories, each episode followed by the episode of the turn before it
    (a question and its answer are adjacent turns); repeats are left to the picking."""
    wanted = sorted({m.turn - 1 for m in memories if m.episode and m.turn and m.turn > 1})
    if not wanted:
        return memories
    async with db.connection() as conn:
        rows = await _all(conn, "turn_episodes", {
            "scope": tenant_name(thread.tenant_id, thread.memory_scope), "turns": wanted})
    before = {_turn_of(r["metadata"]): RecalledMemory(
        str(r["id"]), r["content"], r["valid_from"], _turn_of(r["metadata"]), True)
        for r in rows}
    out: list[RecalledMemory] = []
    for m in memories:
        out.append(m)
        neighbour = before.get(m.turn - 1) if m.episode and m.turn else None
        if neighbour is not None:
            out.append(neighbour)
    return out


def _turn_of(metadata: dict[str, Any]) -> int | None:
    turn = metadata.get("turn")
    return int(turn) if isinstance(turn, int) else None


def summary_with_gaps(summary: str, behind: list[int]) -> str:
    """The summary, saying which turns it lacks (their upkeep failed past its attempts)."""
    if not behind:
        return summary
    listed = ", ".join(str(n) for n in behind[-10:])
    note = (f"(The summary is behind: turn(s) {listed} are not in it, and their facts were "
            "not remembered; ask the user if something from them matters.)")
    return f"{summary}\n{note}".strip()


async def _profile_spec(conn: store.Conn, thread: Thread) -> dict[str, Any]:
    if thread.profile is None:
        return {}
    return dict((await get_profile(conn, thread.tenant_id, thread.profile))["spec"])


async def _submit_turn(db: Database, settings: Settings, thread: Thread, message: str,
                       context: Context) -> Posted:
    """The turn's run, its row in ``thread_turns`` and its ``thread_context`` event, in one
    transaction under the thread's lock (two messages at once get turns n and n+1)."""
    async with db.transaction() as conn:
        await _one(conn, "lock_thread", {"id": thread.id, "tenant_id": thread.tenant_id})
        turn_row = await _one(conn, "next_turn", {"id": thread.id})
        assert turn_row is not None
        turn = int(turn_row["turns"])
        request: dict[str, Any] = {
            "task": context.render(), "agent": agent_engine.agent_config(settings),
            "session_id": thread.session_id, "thread": {"id": str(thread.id), "turn": turn}}
        if thread.profile is not None:
            request["profile"] = thread.profile
        kept = await run_profile(conn, settings, thread.tenant_id, thread.profile)
        submitted = await insert_run(conn, "task", request, name=message[:80],
                                     idempotency_key=None, tenant_id=thread.tenant_id,
                                     profile=kept)
        record = context.to_record()
        await conn.execute(Q["insert_turn"], {
            "thread_id": thread.id, "turn": turn, "run_id": submitted.run_id,
            "message": message, "context": Jsonb(record)})
        await store.append_event(conn, submitted.run_id, "thread_context", {
            "thread_id": str(thread.id), "turn": turn, **record}, trace_id=submitted.trace_id,
            session_id=thread.session_id)
        run = await store.fetch_one(conn, "get_run", {"run_id": submitted.run_id})
        assert run is not None
        await agent_engine.start(conn, run)
    return Posted(thread.id, turn, submitted.run_id, context)


async def context_rows(db: Database, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decision rows for ``onebox explain``: what a thread turn's context held (the memories
    recalled with their dates and the turn each came from, the summary version, tokens)."""
    rows = []
    for event in (e for e in events if e["type"] == "thread_context"):
        p = event["payload"]
        parts = p.get("parts") or {}
        ids = list((parts.get("memories") or {}).get("sources") or [])
        async with db.connection() as conn:
            found = {str(r["id"]): r for r in await _all(conn, "memories_by_ids", {"ids": ids})}
        said = set(p.get("episodes") or [])
        facts = [_memory_line(found[i], i in said) for i in ids if i in found]
        tokens = ", ".join(f"{name} {part['tokens']}" for name, part in parts.items())
        rows.append({"seq": event["seq"], "step": None, "kind": "context", "reason": (
            f"turn {p.get('turn')} of thread {p.get('thread_id')}: summary "
            f"v{p.get('summary_version')}; {p.get('total_tokens')} of {p.get('budget_tokens')}"
            f" tokens ({tokens}); memories recalled: "
            + ("; ".join(facts) if facts else "none"))})
    return rows


def _memory_line(row: dict[str, Any], episode: bool = False) -> str:
    turn = (row.get("metadata") or {}).get("turn")
    origin = f", {'said in' if episode else 'from'} turn {turn}" if turn is not None else ""
    return f"[{row['id']}] ({row['valid_from'].date().isoformat()}{origin}) {row['content']}"
