"""One tenant's knowledge as lists: its collections, documents, memories and memory scopes.

The knowledge modules know nothing of tenants; a tenant's names all start with its prefix
(:func:`onebox.knowledge.collections.tenant_prefix`), and these reads keep to that prefix,
so another tenant's rows are never returned. Names come back as stored (with the prefix).
"""

from __future__ import annotations

import uuid

from onebox.knowledge.queries import sql
from onebox.store.db import Database, Row


async def tenant_collections(db: Database, prefix: str) -> list[Row]:
    """The collections under ``prefix``, by name, each with its document count."""
    return await db.fetch(sql("tenants.tenant_collections"), {"prefix": prefix})


async def tenant_documents(
    db: Database, prefix: str, *, collection: str | None, limit: int,
) -> list[Row]:
    """Documents under ``prefix`` (of one stored collection name, or all), by collection and
    source."""
    return await db.fetch(sql("tenants.tenant_documents"), {
        "prefix": prefix, "collection": collection, "limit": limit})


async def tenant_document(db: Database, prefix: str, document_id: uuid.UUID) -> Row | None:
    """The id, collection and source of a document under ``prefix``, or None."""
    return await db.fetchone(sql("tenants.tenant_document"),
                             {"id": document_id, "prefix": prefix})


async def tenant_memories(
    db: Database, prefix: str, *, scope: str | None, user_id: str | None, limit: int,
) -> list[Row]:
    """Memories under ``prefix`` (of one stored scope and one user, or all), newest first."""
    return await db.fetch(sql("tenants.tenant_memories"), {
        "prefix": prefix, "scope": scope, "user_id": user_id, "limit": limit})


async def tenant_scopes(db: Database, prefix: str) -> list[Row]:
    """The memory scopes under ``prefix``, by name, with their count and newest time."""
    return await db.fetch(sql("tenants.tenant_scopes"), {"prefix": prefix})
