"""Reading one stored document whole (``knowledge_read``).

    doc = await read_document(db, "sales.csv", collections=["docs"], max_bytes=1 << 20)
    doc.text, doc.to_dict()

Search returns chunks; chunks overlap and chunking joins sentences with spaces, so a
statistic over a CSV needs the document itself. Ingestion keeps each document's original
text (migration 0016); this module finds a document by its id (what a search hit names
as ``document_id``), its exact source, or the end of its source path (``sales.csv``
finds ``/home/ana/data/sales.csv``), only among the collections the caller may see.
Nothing here knows tenants: the caller passes the collections (see
:func:`onebox.knowledge.collections.tenant_visible`), so a document of another tenant is
not found, exactly like one that does not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onebox.bounds import DEFAULT_READ_BYTES, MAX_READ_BYTES
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.knowledge.queries import sql
from onebox.store.db import Database

MAX_NAME_CHARS = 4096
_CANDIDATES = 6  # rows fetched to tell one match from several


@dataclass(frozen=True)
class StoredDocument:
    """One document's original text and what identifies it."""

    id: str
    collection: str
    source: str
    source_type: str
    title: str | None
    metadata: dict[str, Any]
    n_chunks: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"document_id": self.id, "collection": self.collection, "source": self.source,
                "source_type": self.source_type, "title": self.title,
                "metadata": self.metadata, "n_chunks": self.n_chunks,
                "bytes": len(self.text.encode()), "text": self.text}


OVERSIZE_FIX = (f"raise input.max_bytes (at most {MAX_READ_BYTES}) or use knowledge_search "
                "for parts of it")


async def read_document(db: Database, document: str, collections: Sequence[str],
                        max_bytes: int = DEFAULT_READ_BYTES,
                        oversize_fix: str = OVERSIZE_FIX) -> StoredDocument:
    """The document named ``document`` in one of ``collections``, with its whole text.

    NotFound when no visible document matches; ValidationError when the name matches
    several (listing them) or the text is over ``max_bytes``; Conflict when the document
    was stored before documents kept their text (saying how to re-ingest it)."""
    if not 1 <= max_bytes <= MAX_READ_BYTES:
        raise ValidationError(f"max_bytes must be from 1 to {MAX_READ_BYTES} (4 MiB), got "
                              f"{max_bytes}", field="max_bytes")
    row = await _find(db, _checked_name(document), collections)
    size = row["text_bytes"]
    if size is None:
        raise Conflict(f"document {row['source']!r} ({row['id']}) in collection "
                       f"{row['collection']!r} was ingested before onebox kept documents' "
                       "text, so it cannot be read whole. Fix: add it again (`onebox kb add "
                       f"<file> --collection {row['collection']}`, or the API's "
                       "/v1/knowledge/upload); its chunks stay searchable meanwhile",
                       field="document")
    if size > max_bytes:
        raise ValidationError(f"document {row['source']!r} ({row['id']}) is {size} bytes, "
                              f"over max_bytes={max_bytes}. Fix: {oversize_fix}",
                              field="max_bytes")
    text = await db.fetchone(sql("kb.document_text"), {"id": row["id"]})
    return StoredDocument(
        id=str(row["id"]), collection=row["collection"], source=row["source"],
        source_type=row["source_type"], title=row["title"], metadata=dict(row["metadata"]),
        n_chunks=row["n_chunks"], text=text["text"] if text and text["text"] else "")


def _checked_name(document: str) -> str:
    name = document.strip() if isinstance(document, str) else ""
    if not name or len(name) > MAX_NAME_CHARS or "\x00" in name:
        raise ValidationError("document must name a stored document: its id (a search "
                              "hit's document_id) or its source path, at most "
                              f"{MAX_NAME_CHARS} characters", field="document")
    return name


async def _find(db: Database, name: str, collections: Sequence[str]) -> dict[str, Any]:
    rows = await db.fetch(sql("kb.find_documents"), {
        "id": _uuid_or_none(name), "document": name, "suffix": "/" + name.lstrip("/"),
        "collections": list(collections), "limit": _CANDIDATES}) if collections else []
    exact = [r for r in rows if r["exact"]]
    if len(exact) == 1 or (not exact and len(rows) == 1):
        return exact[0] if exact else rows[0]
    if not rows:
        raise NotFound(f"no document {name!r} in the knowledge base this run can read. Fix: "
                       "use the document_id of a knowledge_search hit, or a source path "
                       "`onebox kb list` shows", field="document")
    listed = "; ".join(f"{r['collection']}:{r['source']} ({r['id']})" for r in rows[:5])
    raise ValidationError(f"document {name!r} matches several documents: {listed}. Fix: give "
                          "the document id, the whole source path, or input.collection",
                          field="document")


def _uuid_or_none(name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(name)
    except ValueError:
        return None
