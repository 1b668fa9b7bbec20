"""The database side of bench/threads.py: a real thread, its turns, its memory, its context.

Everything goes through the threads runtime on the real database: create_thread, a
thread_turns row per replayed turn (the message; its run is not executed), the facts
written the way a turn's upkeep writes them (thread_upkeep._remember: the thread's scope,
the turn number, dated with the turn), each turn's episode (thread_upkeep.remember_turn: the
turn verbatim, as upkeep stores it before its facts), the summary through the fenced
set_summary, and
gather_context, the function a turn calls (recall of the thread's memories, recent turns,
files, build_context within the profile's budget).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

import threads_replay as replay
from onebox.config import Settings, load_settings
from onebox.knowledge.collections import tenant_name
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import embedding_model_from_settings
from onebox.runtime.threads import context as tc
from onebox.runtime.threads import service as threads
from onebox.runtime.threads.upkeep import _remember, episode_text, remember_turn
from onebox.store.db import Database

TENANT = "bench-threads"
FACTS = {"turns": "each turn's own text is its one fact (a raw turn: 'Melanie: Wow, cool!')",
         "observations": "LoCoMo's observations of the turn (facts with who and what, written "
                         "per turn by the dataset's authors; 78% of the evidence turns have one, "
                         "so reach through memory alone is capped there)",
         "none": "no facts: the model extracts nothing; only the turns' episodes are remembered"}


@dataclass
class Thread:
    thread: threads.Thread
    memory_dia: dict[str, str] = field(default_factory=dict)  # memory id -> LoCoMo dia_id
    session: int = 0  # the LoCoMo session of the last replayed turn


@dataclass(frozen=True)
class Built:
    tokens: int
    dia_ids: frozenset[str]


class ThreadBench:
    def __init__(self, settings: Settings, knowledge: Knowledge, facts: str) -> None:
        self.facts = facts
        self.settings = settings
        self.knowledge = knowledge
        self.db = knowledge.db
        self.writes = {"facts": 0, "deduplicated": 0, "superseded": 0, "summaries": 0,
                       "episodes": 0, "episodes_deduplicated": 0}

    async def drop_leftovers(self) -> None:
        """Threads an interrupted earlier run of the bench left behind."""
        for old in await threads.list_threads(self.db, TENANT, limit=1000):
            await self.drop(Thread(old))

    async def new_thread(self, name: str) -> Thread:
        made = await threads.create_thread(self.db, self.settings, TENANT, title=name)
        return Thread(made)

    async def drop(self, thread: Thread) -> None:
        """The thread and its memories, removed in bulk (remove_thread forgets one by one)."""
        scope = tenant_name(TENANT, thread.thread.memory_scope)
        for stmt, value in (("DELETE FROM onebox.memories WHERE scope = %(v)s", scope),
                            ("DELETE FROM onebox.fts_terms WHERE space = %(v)s", f"mem:{scope}"),
                            ("DELETE FROM onebox.fts_spaces WHERE space = %(v)s", f"mem:{scope}"),
                            ("DELETE FROM onebox.threads WHERE id = %(v)s", thread.thread.id)):
            await self.db.fetch(stmt + " RETURNING 1", {"v": value})

    async def prime_embeddings(self, texts: list[str]) -> None:
        """Embed a conversation's turns in batches (cached), so the replay is not one call per turn."""
        for i in range(0, len(texts), 64):
            await self.knowledge.embedder.passages(texts[i:i + 64])

    async def add_turn(self, thread: Thread, n: int, turn: replay.Turn,
                       summaries: dict[int, str], facts: list[str]) -> None:
        """Turn n as the runtime records it, then its upkeep: its facts and, when a new
        session starts, the summary (LoCoMo's summary of the session before, as the
        scripted model's reply)."""
        t = thread.thread
        async with self.db.transaction() as conn:
            await conn.execute(threads.Q["next_turn"], {"id": t.id})
            await conn.execute(threads.Q["insert_turn"], {
                "thread_id": t.id, "turn": n, "run_id": uuid.uuid4(),
                "message": turn.message, "context": Jsonb({})})
        session = int(turn.dia_id[1:].split(":")[0])
        if session != thread.session and thread.session in summaries:
            await self._summarise(thread, summaries[thread.session], n)
        thread.session = session
        done = {"turn": n, "run_id": uuid.uuid4(), "created_at": turn.at,
                "message": turn.message, "answer": None}
        episode = await remember_turn(self.knowledge, t, done)
        thread.memory_dia.setdefault(episode["id"], turn.dia_id)
        self.writes["episodes"] += 1
        self.writes["episodes_deduplicated"] += episode["deduplicated"]
        for fact in facts:
            made = await _remember(self.knowledge, t, done, fact)
            thread.memory_dia.setdefault(made["id"], turn.dia_id)
            self.writes["facts"] += 1
            self.writes["deduplicated"] += made["deduplicated"]
            self.writes["superseded"] += len(made["superseded"])

    async def _summarise(self, thread: Thread, summary: str, n: int) -> None:
        t = thread.thread
        async with self.db.transaction() as conn:
            await conn.execute(threads.Q["set_summary"], {
                "id": t.id, "summary": summary, "version": t.summary_version,
                "summarized_turns": n - 1})
        thread.thread = await threads.get_thread(self.db, TENANT, t.id)
        self.writes["summaries"] += 1

    async def embed_query_ms(self, text: str) -> float:
        """Milliseconds the model takes to embed ``text`` as a query (bypassing the cache);
        the cached embedder then holds the vector for the recall."""
        started = time.perf_counter()
        await self.knowledge.embedder.model.embed_queries([text])
        elapsed_ms = (time.perf_counter() - started) * 1000
        await self.knowledge.embedder.query(text)
        return elapsed_ms

    async def context(self, thread: Thread, message: str, done: list[replay.Turn],
                      options: threads.RecallOptions) -> Built:
        """The runtime's gather_context with the recipe's recall options."""
        built = await threads.gather_context(self.db, self.knowledge, thread.thread, message,
                                             options)
        return Built(built.total_tokens, frozenset(self._dia_ids(thread, built, done)))

    async def evidence_ranks(self, thread: Thread, question: str, deep: int) -> dict[str, int]:
        """The first rank of each LoCoMo turn (by its facts or episode) in the thread's recall
        of ``question``, ``deep`` memories down."""
        found = await threads.recall_memories(self.knowledge, thread.thread, question, deep)
        ranks: dict[str, int] = {}
        for rank, memory in enumerate(found):
            dia = thread.memory_dia.get(memory.id)
            if dia is not None:
                ranks.setdefault(dia, rank)
        return ranks

    def _dia_ids(self, thread: Thread, built: tc.Context, done: list[replay.Turn]) -> set[str]:
        out = set()
        for part in built.parts:
            for source in part.sources:
                if source.startswith("turn:"):
                    out.add(done[int(source[5:]) - 1].dia_id)
                elif source in thread.memory_dia:
                    out.add(thread.memory_dia[source])
        return out

    def describe(self) -> dict[str, Any]:
        return {"replay": ("each LoCoMo turn is a turn of a real thread (thread_turns row; its "
                           "run is not executed), its upkeep replayed directly: the facts are "
                           "the scripted model's extraction (see facts), written as upkeep "
                           "writes facts, dated with the turn's session; the summary is "
                           "LoCoMo's summary of the session before (set at each new session); "
                           "the context is threads.gather_context, as a turn builds it"),
                "facts": FACTS[self.facts],
                "budget_tokens": tc.DEFAULT_BUDGET_TOKENS,
                "recent_turns": tc.RECENT_TURNS, "memory_writes": dict(self.writes)}


def episode_texts(turns: list[replay.Turn]) -> list[str]:
    """What each turn's episode embeds (primed in batches like the facts)."""
    return [episode_text(t.message, None) for t in turns]


@asynccontextmanager
async def open_bench(facts: str) -> AsyncIterator[ThreadBench]:
    settings = load_settings()
    db = await Database.open(settings)
    model = embedding_model_from_settings(settings)
    try:
        bench = ThreadBench(settings, Knowledge.build(db, model, settings), facts)
        await bench.drop_leftovers()
        yield bench
    finally:
        await model.close()
        await db.close()
