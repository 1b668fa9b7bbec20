"""Agent memory: remember, recall, supersede, forget (compaction lives in ``archive.py``).

    store = MemoryStore(db, embedder)
    await store.remember("proj", "Ana's office is room 12.", user_id="ana")
    # {"id": "...", "deduplicated": False, "superseded": []}
    hits = await store.recall("proj", "where is Ana's office?", k=5, user_id="ana")

A duplicate (same content hash, or raw cosine >= ``dedup_similarity`` with no
contradiction cue between the two texts) returns the existing id with
``deduplicated: True``. A near-identical memory that contradicts an older one
(different numbers, negation, antonyms; cosine >= ``supersede_similarity``; at
most four words changed, i.e. a revision of the same statement) supersedes it: the old row gets ``invalid_at`` and ``superseded_by``, and stops
being recalled. Nothing is deleted except by :meth:`MemoryStore.forget`.

Time: ``happened_at`` (or a ``date`` in the metadata, e.g. a session's date) anchors
the memory; a time phrase in the content ("yesterday", "two years ago", "上个月",
"8 May 2023") is resolved against it and stored as when the fact happened, with its
precision. Recall boosts memories stated with a time for "when" / "how long ago"
questions, and memories whose time falls in a period the query names ("in May 2023",
"last week"); each hit carries ``happened_at`` and a readable ``when``.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from psycopg.types.json import Jsonb

from onebox.errors import ValidationError
from onebox.knowledge.embedder import CachedEmbedder, content_hash, vector_literal
from onebox.knowledge.fts import build_fts_query
from onebox.knowledge.fusion import FusionMethod, fuse
from onebox.knowledge.guard import contradiction, small_edit
from onebox.knowledge.queries import sql
from onebox.knowledge.search import iterative_scans, set_hnsw_scan
from onebox.knowledge.text import first_sentence, segment_for_fts
from onebox.knowledge.timeparse import TimeMention, asks_when, describe, find_time, parse_when
from onebox.store.db import Database

MemoryKind = Literal["short", "long", "summary"]
EXACT_SCAN_MAX_ROWS = 2_000
STATED_TIME_BONUS = 0.1  # a "when" question: the memory states a time
PERIOD_MATCH_BONUS = 1.5  # happened in the period the query names: above any score outside it
TIME_RERANK_DEPTH = 50
_ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*|\b\d[\d.,:/-]*\b")


@dataclass(frozen=True)
class MemoryHit:
    id: str
    content: str
    summary: str
    kind: str
    metadata: dict[str, Any]
    created_at: datetime
    valid_from: datetime
    scores: dict[str, float]
    happened_at: datetime | None = None
    happened_precision: str | None = None

    def when(self, now: datetime | None = None) -> str | None:
        """When it happened, readable: "on 7 May 2023 (2 years ago)"; None when unknown."""
        if self.happened_at is None:
            return None
        return describe(self.happened_at, self.happened_precision or "minute", now)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "content": self.content, "summary": self.summary,
                "kind": self.kind, "metadata": self.metadata,
                "created_at": self.created_at.isoformat(),
                "valid_from": self.valid_from.isoformat(),
                "happened_at": self.happened_at.isoformat() if self.happened_at else None,
                "happened_precision": self.happened_precision, "when": self.when(),
                "scores": self.scores}


def space_of(scope: str) -> str:
    return f"mem:{scope}"


def normalise(content: str) -> str:
    return " ".join(content.split())


def entities_of(text: str) -> list[str]:
    found = dict.fromkeys(m.group(0).strip(" .,") for m in _ENTITY.finditer(text))
    return [e for e in found if e][:20]


class MemoryStore:
    def __init__(
        self, db: Database, embedder: CachedEmbedder, dedup_similarity: float = 0.97,
        supersede_similarity: float = 0.92,
        weights: dict[str, float] | None = None, method: FusionMethod = "score",
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.dedup_similarity = dedup_similarity
        self.supersede_similarity = supersede_similarity
        self.weights = weights or {"fulltext": 0.5, "vector": 0.5}
        self.method: FusionMethod = method

    async def remember(
        self, scope: str, content: str, user_id: str = "", metadata: dict[str, Any] | None = None,
        kind: MemoryKind = "short", supersedes: str | None = None,
        execution_id: str | None = None, valid_from: datetime | None = None,
        auto_supersede: bool = True, context: str | None = None,
        happened_at: datetime | str | None = None,
    ) -> dict[str, Any]:
        """Store a memory, or return the existing duplicate's id with ``deduplicated: True``.

        ``happened_at`` (a datetime or a date string; else ``metadata["date"]``) is when
        the conversation took place; a time phrase in ``content`` is resolved against it.

        ``context`` (e.g. the conversation turn this one answers) is indexed with the
        content, for embedding and full-text, and kept in ``metadata["context"]``.
        """
        text = _check(scope, content)
        happened = happened_time(text, happened_at, metadata)
        indexed = f"{normalise(context)}\n{text}" if context and context.strip() else text
        if indexed != text:
            metadata = {**(metadata or {}), "context": normalise(context or "")}
        digest = content_hash(text)
        same = await self.db.fetchone(sql("memory.find_hash"),
                                      {"scope": scope, "user_id": user_id, "hash": digest})
        if same:
            return {"id": str(same["id"]), "deduplicated": True, "reason": "same content"}
        vector = (await self.embedder.passages([indexed]))[0]
        near = await self._search_vector(
            "nearest", {"q": vector_literal(vector), "scope": scope, "user_id": user_id,
                        "n": 5, "current": True})
        replaced = [supersedes] if supersedes else []
        for row in near:
            clash = contradiction(text, row["content"])
            if clash is None and row["similarity"] >= self.dedup_similarity:
                return {"id": str(row["id"]), "deduplicated": True,
                        "reason": f"cosine {row['similarity']:.3f}"}
            if (clash and auto_supersede and row["similarity"] >= self.supersede_similarity
                    and small_edit(text, row["content"])):
                replaced.append(str(row["id"]))
        new_id = str(uuid.uuid4())
        async with self.db.transaction() as conn:
            await conn.execute(sql("memory.insert"), {
                "id": new_id, "scope": scope, "user_id": user_id, "kind": kind,
                "content": text, "hash": digest, "summary": first_sentence(text),
                "entities": entities_of(text), "metadata": Jsonb(metadata or {}),
                "embedding": vector_literal(vector), "seg": segment_for_fts(indexed),
                "execution_id": execution_id, "valid_from": valid_from, **_time_params(happened)})
            await conn.execute(sql("fts.add_memory_terms"),
                               {"ids": [new_id], "space": space_of(scope)})
            superseded = []
            for old in dict.fromkeys(replaced):
                cur = await conn.execute(sql("memory.supersede"), {
                    "old_id": old, "new_id": new_id, "scope": scope, "user_id": user_id})
                superseded += [str(r["id"]) for r in await cur.fetchall()]
        return {"id": new_id, "deduplicated": False, "superseded": superseded}

    async def recall(
        self, scope: str, query: str, k: int = 10, user_id: str = "",
        include_superseded: bool = False, time_boost: bool = True, now: datetime | None = None,
    ) -> list[MemoryHit]:
        """Hybrid recall within one scope and user; bumps the access count of what it returns.

        With ``time_boost``, "when" questions and periods named in the query (resolved
        against ``now``) rerank the candidates by when they happened."""
        if not query.strip():
            raise ValidationError("the recall query is empty", field="query")
        params = {"scope": scope, "user_id": user_id, "current": not include_superseded,
                  "n": max(50, k)}
        fulltext, vector = await asyncio.gather(
            self._fulltext(query, params), self._vector(query, params))
        lists = {"fulltext": fulltext, "vector": vector}
        fused = fuse(lists, self.weights, self.method)
        if time_boost:
            fused = await self._time_rerank(query, fused, now or datetime.now(UTC))
        fused = fused[:k]
        if not fused:
            return []
        ids = [f.id for f in fused]
        async with self.db.transaction() as conn:
            await conn.execute(sql("memory.touch"), {"ids": ids})
            cur = await conn.execute(sql("memory.by_ids"), {"ids": ids})
            rows = {r["id"]: r for r in await cur.fetchall()}
        return [_hit(rows[f.id], f) for f in fused if f.id in rows]

    async def _time_rerank(self, query: str, fused: list[Any], now: datetime) -> list[Any]:
        """Add the time bonuses to the top candidates' fused scores and sort again."""
        period = find_time(query, now)
        when = asks_when(query)
        if not fused or (period is None and not when):
            return fused
        top = fused[:TIME_RERANK_DEPTH]
        rows = await self.db.fetch(sql("memory.times"), {"ids": [f.id for f in top]})
        for row in rows:
            bonus = time_bonus(row, period, when)
            if bonus:
                entry = next(f for f in top if f.id == row["id"])
                entry.score += bonus
                entry.raw["time"] = bonus
        return sorted(top, key=lambda f: -f.score) + fused[TIME_RERANK_DEPTH:]

    async def _fulltext(self, query: str, params: dict[str, Any]) -> list[tuple[Any, float]]:
        fts = await build_fts_query(self.db, query, [space_of(params["scope"])])
        if fts is None:
            return []
        rows = await self.db.fetch(sql("memory.fulltext"), {**params, **fts.params()})
        return [(r["id"], float(r["score"])) for r in rows]

    async def _vector(self, query: str, params: dict[str, Any]) -> list[tuple[Any, float]]:
        args = {**params, "q": vector_literal(await self.embedder.query(query))}
        rows = await self._search_vector("vector", args)
        return [(r["id"], float(r["score"])) for r in rows]

    async def _search_vector(self, kind: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """HNSW when the scope is large (widened; exact if it comes back short), else exact.
        ``kind`` is ``vector`` (ids + scores) or ``nearest`` (ids, contents, similarity)."""
        exact, ann = (f"memory.{kind}_exact", f"memory.{kind}_ann") if kind == "vector" else (
            "memory.nearest", "memory.nearest_ann")
        count = await self.db.fetchone(sql("memory.count_scope"),
                                       {**args, "cap": EXACT_SCAN_MAX_ROWS + 1})
        if count and count["n"] > EXACT_SCAN_MAX_ROWS:
            async with self.db.transaction() as conn:
                await set_hnsw_scan(conn, min(1000, max(40, 4 * args["n"])),
                                    iterative=await iterative_scans(self.db))
                cur = await conn.execute(sql(ann), args)
                rows = await cur.fetchall()
            if len(rows) >= args["n"]:
                return rows
        return await self.db.fetch(sql(exact), args)

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        return await self.db.fetchone(sql("memory.get"), {"id": memory_id})

    async def forget(self, memory_id: str, user_id: str | None = None,
                     scope_prefix: str | None = None) -> bool:
        """Hard-delete one memory (live or archived). False when no such memory (for that
        user, in a scope starting with ``scope_prefix``: a tenant deletes only its own)."""
        args = {"id": check_id(memory_id), "user_id": user_id, "scope_prefix": scope_prefix}
        async with self.db.transaction() as conn:
            cur = await conn.execute(sql("memory.scope_of"), args)
            row = await cur.fetchone()
            if row:
                await conn.execute(sql("fts.remove_memory_terms"),
                                   {"ids": [args["id"]], "space": space_of(row["scope"])})
                await conn.execute(sql("memory.delete"), args)
                return True
            cur = await conn.execute(sql("memory.delete_archived"), args)
            return await cur.fetchone() is not None


def happened_time(
    text: str, happened_at: datetime | str | None, metadata: dict[str, Any] | None,
) -> TimeMention | None:
    """When the fact in ``text`` happened: a phrase in it resolved against the anchor
    (``happened_at``, else a parseable ``metadata["date"]``, else now), else the anchor."""
    anchor = parse_when(happened_at) if happened_at is not None else _metadata_date(metadata)
    stated = find_time(text, anchor.at if anchor else datetime.now(UTC))
    if stated or anchor is None:
        return stated
    return TimeMention(anchor.at, anchor.precision, "")  # no phrase: the conversation's date


def _metadata_date(metadata: dict[str, Any] | None) -> TimeMention | None:
    value = (metadata or {}).get("date")
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return parse_when(value, field="metadata.date")
    except ValidationError:
        return None  # free-form metadata: an unreadable date anchors nothing


def _time_params(happened: TimeMention | None) -> dict[str, Any]:
    if happened is None:
        return {"happened_at": None, "happened_precision": None, "happened_text": None}
    return {"happened_at": happened.at, "happened_precision": happened.precision,
            "happened_text": happened.text or None}  # None: the conversation's date


def time_bonus(row: dict[str, Any], period: TimeMention | None, when: bool) -> float:
    """The score a memory's time adds for this query (0 when it does not match)."""
    bonus = STATED_TIME_BONUS if when and row["happened_text"] else 0.0
    if period is not None:
        start, end = period.window()
        mine = TimeMention(row["happened_at"], row["happened_precision"] or "minute", "")
        m_start, m_end = mine.window()
        if m_start < end and start < m_end:
            bonus += PERIOD_MATCH_BONUS
    return bonus


def check_id(value: str, field: str = "id") -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError as exc:
        raise ValidationError(f"{value!r} is not a memory id (a UUID)", field=field) from exc


def _check(scope: str, content: str) -> str:
    if not scope or not scope.strip():
        raise ValidationError("scope must not be empty", field="scope")
    text = normalise(content)
    if not text:
        raise ValidationError("content must not be empty", field="content")
    return text


def _hit(row: dict[str, Any], fused: Any) -> MemoryHit:
    scores = {"fused": round(fused.score, 6), **{k: round(v, 6) for k, v in fused.raw.items()}}
    return MemoryHit(str(row["id"]), row["content"], row["summary"], row["kind"],
                     row["metadata"], row["created_at"], row["valid_from"], scores,
                     row.get("happened_at"), row.get("happened_precision"))
