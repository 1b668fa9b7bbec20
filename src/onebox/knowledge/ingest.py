"""Ingestion: documents -> chunks -> embeddings -> rows, incrementally.

    kb = KnowledgeBase(db, CachedEmbedder(db, model))
    result = await kb.add_text("notes/a.md", text, collection="docs")
    results = await kb.add_paths([Path("docs/")], collection="docs", progress=print)

Re-adding an unchanged document is a no-op; a changed one keeps the chunks
whose text did not change (same row, same vector), inserts the new ones and
deletes the ones that disappeared; removing a document removes its chunks. All
row changes of one document happen in one transaction, after its embeddings
are computed (through the cache) outside of it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from onebox.errors import ValidationError
from onebox.knowledge.chunking import Chunk, ChunkingConfig, Section, chunk_sections
from onebox.knowledge.collections import DEFAULT_COLLECTION, ensure_collection, space_of
from onebox.knowledge.docparse import ParseLimits, load_file
from onebox.knowledge.embedder import CachedEmbedder, content_hash, vector_literal
from onebox.knowledge.loaders import iter_files
from onebox.knowledge.queries import sql
from onebox.knowledge.text import segment_for_fts
from onebox.store.db import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestResult:
    document_id: str
    source: str
    status: Literal["added", "updated", "unchanged"]
    chunks_added: int = 0
    chunks_kept: int = 0
    chunks_removed: int = 0


@dataclass
class IngestProgress:
    files_total: int = 0
    files_done: int = 0
    chunks_total: int = 0
    chunks_embedded: int = 0
    current: str = ""
    results: list[IngestResult] = field(default_factory=list)


ProgressCallback = Callable[[IngestProgress], None]


@dataclass(frozen=True)
class DocumentInput:
    source: str
    sections: list[Section]
    collection: str = DEFAULT_COLLECTION
    source_type: str = "text"
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    execution_id: str | None = None
    snapshot_id: str | None = None
    text: str | None = None  # the original text; None: rebuilt from the sections

    def full_text(self) -> str:
        """What ``knowledge_read`` returns: the original text when the loader kept it,
        else the sections (with their headings) joined by blank lines."""
        if self.text is not None:
            return self.text
        if len(self.sections) == 1 and self.sections[0].heading is None:
            return self.sections[0].text
        return "\n\n".join(f"{s.heading}\n{s.text}" if s.heading else s.text
                             for s in self.sections)

    def fingerprint(self, config: ChunkingConfig) -> str:
        body = json.dumps([[s.heading, s.text] for s in self.sections], ensure_ascii=False)
        extra = json.dumps([self.title, self.metadata, self.execution_id, self.snapshot_id,
                            config.chunk_tokens, config.max_tokens, config.overlap_tokens],
                           sort_keys=True, default=str)
        return content_hash(body + "\x00" + extra)


class KnowledgeBase:
    """Adds, updates, removes and lists documents of the knowledge base."""

    def __init__(
        self, db: Database, embedder: CachedEmbedder, chunking: ChunkingConfig | None = None,
        parse_limits: ParseLimits | None = None,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.chunking = chunking or ChunkingConfig()
        self.parse_limits = parse_limits or ParseLimits()

    async def add_text(self, source: str, text: str, **fields: Any) -> IngestResult:
        return await self.add_document(DocumentInput(source, [Section(None, text)], **fields))

    async def add_document(
        self, doc: DocumentInput, on_chunks: Callable[[int, int], None] | None = None
    ) -> IngestResult:
        await ensure_collection(self.db, doc.collection, self.embedder.model)
        fingerprint = doc.fingerprint(self.chunking)
        text = self._text_of(doc)
        existing = await self.db.fetchone(
            sql("kb.get_document"), {"collection": doc.collection, "source": doc.source})
        if existing and existing["content_hash"] == fingerprint:
            if existing["text_bytes"] is None:  # ingested before documents kept their text
                async with self.db.transaction() as conn:
                    await conn.execute(sql("kb.set_document_text"), {
                        "id": existing["id"], "text": text, "text_bytes": len(text.encode())})
            return IngestResult(str(existing["id"]), doc.source, "unchanged")
        chunks = chunk_sections(doc.sections, self.embedder.model.count_tokens, self.chunking)
        vectors = await self.embedder.passages([c.embed_text for c in chunks], on_chunks)
        doc_id = str(existing["id"]) if existing else str(uuid.uuid4())
        async with self.db.transaction() as conn:
            counts = await self._write(conn, doc, doc_id, fingerprint, chunks, vectors, text)
        status: Literal["added", "updated"] = "updated" if existing else "added"
        return IngestResult(doc_id, doc.source, status, *counts)

    async def _write(
        self, conn: AsyncConnection[Any], doc: DocumentInput, doc_id: str, fingerprint: str,
        chunks: list[Chunk], vectors: list[list[float]], text: str,
    ) -> tuple[int, int, int]:
        meta = Jsonb(_chunk_metadata(doc, doc_id))
        await conn.execute(sql("kb.upsert_document"), {
            "id": doc_id, "collection": doc.collection, "source": doc.source,
            "source_type": doc.source_type, "title": doc.title, "content_hash": fingerprint,
            "metadata": Jsonb(doc.metadata), "execution_id": doc.execution_id,
            "snapshot_id": doc.snapshot_id, "n_chunks": len(chunks), "text": text,
            "text_bytes": len(text.encode())})
        cur = await conn.execute(sql("kb.document_chunks"), {"document_id": doc_id})
        old: dict[str, list[int]] = {}
        for row in await cur.fetchall():
            old.setdefault(row["content_hash"], []).append(row["id"])
        keep_ids, keep_ords, new = [], [], []
        for chunk, vector in zip(chunks, vectors, strict=True):
            ids = old.get(content_hash(chunk.embed_text))
            if ids:
                keep_ids.append(ids.pop(0))
                keep_ords.append(chunk.ordinal)
            else:
                new.append((chunk, vector))
        stale = [i for ids in old.values() for i in ids]
        space = space_of(doc.collection)
        if stale:
            await conn.execute(sql("fts.remove_kb_terms"), {"ids": stale, "space": space})
            await conn.execute(sql("kb.delete_chunks"), {"ids": stale})
        await conn.execute(sql("kb.update_ordinals"),
                           {"ids": keep_ids, "ordinals": keep_ords, "metadata": meta})
        if new:
            inserted = await _insert_chunks(conn, doc, doc_id, new, meta)
            await conn.execute(sql("fts.add_kb_terms"), {"ids": inserted, "space": space})
        if stale or new:
            await conn.execute(sql("kb.invalidate_cache"), {"doc_ids": [doc_id]})
        return len(new), len(keep_ids), len(stale)

    def _text_of(self, doc: DocumentInput) -> str:
        """The document's text to keep, bounded like the files it comes from
        (``knowledge.parse_max_bytes``); no NUL (PostgreSQL text cannot hold one)."""
        text = doc.full_text().replace("\x00", "")
        size, limit = len(text.encode()), self.parse_limits.max_bytes
        if size > limit:
            raise ValidationError(f"{doc.source}: its text is {size} bytes, over the "
                                  f"{limit}-byte limit (knowledge.parse_max_bytes); split it "
                                  "or raise the setting", field="text")
        return text

    async def add_documents(
        self, docs: list[DocumentInput], progress: Callable[[int, int], None] | None = None,
        batch_docs: int = 256,
    ) -> list[IngestResult]:
        """Ingest many documents, embedding their chunks in model-sized batches across
        documents first (through the cache), then writing each document."""
        results: list[IngestResult] = []
        for start in range(0, len(docs), batch_docs):
            group = docs[start : start + batch_docs]
            texts = [c.embed_text for doc in group for c in chunk_sections(
                doc.sections, self.embedder.model.count_tokens, self.chunking)]
            await self.embedder.passages(texts)
            for doc in group:
                results.append(await self.add_document(doc))
            if progress:
                progress(start + len(group), len(docs))
        return results

    async def add_paths(
        self, paths: list[Path], collection: str = DEFAULT_COLLECTION,
        metadata: dict[str, Any] | None = None, execution_id: str | None = None,
        snapshot_id: str | None = None, progress: ProgressCallback | None = None,
    ) -> list[IngestResult]:
        """Ingest files and folders; reports progress after every embedded batch and file.

        Each file is parsed by :func:`onebox.knowledge.docparse.load_file` (PDF, DOCX and
        HTML in the document sandbox, with its limits) and stored under its name
        (:func:`onebox.knowledge.loaders.source_name`), not its host path."""
        files = list(iter_files(paths))
        state = IngestProgress(files_total=len(files))
        for path, name in files:
            loaded = await load_file(path, self.parse_limits)
            state.current = str(path)
            doc = DocumentInput(
                source=name, sections=loaded.sections, collection=collection,
                source_type=loaded.source_type, title=loaded.title,
                metadata={**loaded.metadata, **(metadata or {})},
                execution_id=execution_id, snapshot_id=snapshot_id, text=loaded.original)
            base = state.chunks_embedded

            def on_chunks(done: int, total: int, base: int = base) -> None:
                state.chunks_embedded = base + done
                state.chunks_total = max(state.chunks_total, base + total)
                if progress:
                    progress(state)

            state.results.append(await self.add_document(doc, on_chunks))
            state.files_done += 1
            if progress:
                progress(state)
        return state.results

    async def remove(self, source: str, collection: str = DEFAULT_COLLECTION) -> bool:
        """Delete a document and its chunks; False when it was not there."""
        row = await self.db.fetchone(
            sql("kb.get_document"), {"collection": collection, "source": source})
        if row is None:
            return False
        async with self.db.transaction() as conn:
            cur = await conn.execute(sql("kb.document_chunks"), {"document_id": row["id"]})
            ids = [r["id"] for r in await cur.fetchall()]
            await conn.execute(sql("fts.remove_kb_terms"),
                               {"ids": ids, "space": space_of(collection)})
            await conn.execute(sql("kb.delete_document"), {"id": row["id"]})
            await conn.execute(sql("kb.invalidate_cache"), {"doc_ids": [row["id"]]})
        return True

    async def list_documents(
        self, collection: str | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        return await self.db.fetch(
            sql("kb.list_documents"), {"collection": collection, "limit": limit})


def _chunk_metadata(doc: DocumentInput, doc_id: str) -> dict[str, Any]:
    """What each chunk carries for filtering: the document's metadata plus its provenance."""
    meta: dict[str, Any] = dict(doc.metadata)
    meta.update(source=doc.source, source_type=doc.source_type, document_id=doc_id)
    if doc.execution_id:
        meta["execution_id"] = doc.execution_id
    if doc.snapshot_id:
        meta["snapshot_id"] = doc.snapshot_id
    return meta


async def _insert_chunks(
    conn: AsyncConnection[Any], doc: DocumentInput, doc_id: str,
    new: list[tuple[Chunk, list[float]]], meta: Jsonb,
) -> list[int]:
    chunks = [c for c, _ in new]
    cur = await conn.execute(sql("kb.insert_chunks"), {
        "document_id": doc_id, "collection": doc.collection, "metadata": meta,
        "ordinals": [c.ordinal for c in chunks],
        "contents": [c.content for c in chunks],
        "hashes": [content_hash(c.embed_text) for c in chunks],
        "headings": [c.heading for c in chunks],
        "n_tokens": [c.n_tokens for c in chunks],
        "segs": [segment_for_fts(c.embed_text) for c in chunks],
        "embeddings": [vector_literal(v) for _, v in new],
    })
    return [row["id"] for row in await cur.fetchall()]
