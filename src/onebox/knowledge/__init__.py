"""Knowledge base, memory and semantic answer cache, all in PostgreSQL (see docs/knowledge.md)."""

from onebox.knowledge.archive import CompactResult, compact, restore
from onebox.knowledge.cache import AnswerCache, CacheHit, CacheMiss
from onebox.knowledge.chunking import Chunk, ChunkingConfig, Section
from onebox.knowledge.ingest import DocumentInput, IngestProgress, IngestResult, KnowledgeBase
from onebox.knowledge.memory import MemoryHit, MemoryStore
from onebox.knowledge.search import SearchFilters, SearchHit, SearchOptions
from onebox.knowledge.service import Knowledge, open_knowledge

__all__ = [
    "AnswerCache", "CacheHit", "CacheMiss", "Chunk", "ChunkingConfig", "CompactResult",
    "DocumentInput", "IngestProgress", "IngestResult", "Knowledge", "KnowledgeBase",
    "MemoryHit", "MemoryStore", "SearchFilters", "SearchHit", "SearchOptions", "Section",
    "compact", "open_knowledge", "restore",
]
