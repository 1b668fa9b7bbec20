"""Knowledge, memory and the answer cache, namespaced per tenant.

The knowledge modules know nothing of tenants, so the API prefixes every name
it passes down with the tenant: collection ``docs`` of tenant ``acme`` is stored
as ``acme/docs``, memory scope ``proj`` as ``acme/proj``, and cache scopes alike
(:func:`onebox.knowledge.collections.tenant_name`, which the CLI and runs call too).
Names come back without the prefix, and an id that belongs to another tenant is
answered as not found.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from onebox.errors import NotFound, ValidationError
from onebox.knowledge.archive import compact
from onebox.knowledge.collections import TENANT_SEP, local_name, tenant_name, tenant_prefix
from onebox.knowledge.docparse import parse_document
from onebox.knowledge.ingest import DocumentInput, IngestResult
from onebox.knowledge.memory import check_id
from onebox.knowledge.search import SearchFilters
from onebox.knowledge.service import Knowledge
from onebox.knowledge.tenants import (
    tenant_collections,
    tenant_document,
    tenant_documents,
    tenant_memories,
    tenant_scopes,
)

SEP = TENANT_SEP


def prefix(tenant_id: str) -> str:
    return tenant_prefix(tenant_id)


def inner(tenant_id: str, name: str, field: str) -> str:
    if not name or len(name) > 120 or not name.isprintable():
        raise ValidationError(f"{field} must be 1-120 printable characters", field=field)
    return tenant_name(tenant_id, name)


def outer(tenant_id: str, name: str) -> str:
    return local_name(tenant_id, name)


async def add_text(
    kn: Knowledge, tenant_id: str, *, collection: str, source: str, text: str,
    title: str | None, metadata: dict[str, Any],
) -> dict[str, Any]:
    if not text.strip():
        raise ValidationError("the document text is empty", field="text")
    result = await kn.kb.add_text(source, text, collection=inner(tenant_id, collection,
                                                                 "collection"),
                                  title=title, metadata=metadata)
    return _result(result, collection)


async def add_upload(
    kn: Knowledge, tenant_id: str, *, collection: str, filename: str, data: bytes,
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """Index an uploaded file (text, Markdown, HTML, PDF, DOCX, code) under its file name.

    PDF, DOCX and HTML are parsed in the document sandbox (``onebox.knowledge.docparse``)."""
    name = Path(filename or "upload.txt").name or "upload.txt"
    loaded = await parse_document(data, name, kn.kb.parse_limits, field="file")
    doc = DocumentInput(source=name, sections=loaded.sections,
                        collection=inner(tenant_id, collection, "collection"),
                        source_type=loaded.source_type, title=loaded.title,
                        metadata={**loaded.metadata, **metadata})
    return _result(await kn.kb.add_document(doc), collection)


def _result(result: IngestResult, collection: str) -> dict[str, Any]:
    return {**result.__dict__, "collection": collection}


async def list_documents(
    kn: Knowledge, tenant_id: str, collection: str | None, limit: int
) -> dict[str, Any]:
    stored = inner(tenant_id, collection, "collection") if collection else None
    cols = await tenant_collections(kn.db, prefix(tenant_id))
    docs = await tenant_documents(kn.db, prefix(tenant_id), collection=stored, limit=limit)
    for row in cols:
        row["name"] = outer(tenant_id, row["name"])
    for row in docs:
        row["collection"] = outer(tenant_id, row["collection"])
    return {"collections": cols, "documents": docs}


async def delete_document(kn: Knowledge, tenant_id: str, document_id: uuid.UUID) -> None:
    row = await tenant_document(kn.db, prefix(tenant_id), document_id)
    if row is None or not await kn.kb.remove(row["source"], row["collection"]):
        raise NotFound(f"document {document_id} does not exist", field="document_id")


async def search(
    kn: Knowledge, tenant_id: str, *, query: str, k: int, collections: list[str] | None,
    metadata: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    if collections:
        names = [inner(tenant_id, c, "collections") for c in collections]
        known = {r["name"] for r in await tenant_collections(kn.db, prefix(tenant_id))}
        missing = [outer(tenant_id, n) for n in names if n not in known]
        if missing:
            raise NotFound(f"collection {missing[0]!r} does not exist", field="collections")
    else:
        names = [r["name"] for r in await tenant_collections(kn.db, prefix(tenant_id))]
    if not query.strip():
        raise ValidationError("the search query is empty", field="query")
    if not names:
        return []
    hits = await kn.search(query, k, SearchFilters(collections=names, metadata=metadata or None))
    out = []
    for hit in hits:
        data = hit.to_dict()
        data["document"] = dict(data["document"],
                                collection=outer(tenant_id, data["document"]["collection"]))
        out.append(data)
    return out


async def remember(
    kn: Knowledge, tenant_id: str, *, scope: str, content: str, user_id: str, kind: str,
    metadata: dict[str, Any], happened_at: str | None = None,
) -> dict[str, Any]:
    made = await kn.memory.remember(inner(tenant_id, scope, "scope"), content, user_id=user_id,
                                    metadata=metadata, kind=kind,  # type: ignore[arg-type]
                                    happened_at=happened_at)
    row = await kn.memory.get(made["id"])
    assert row is not None
    return {**memory_row(tenant_id, row), "deduplicated": made["deduplicated"],
            "superseded": made.get("superseded", [])}


def memory_row(tenant_id: str, row: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "scope", "user_id", "kind", "content", "summary", "metadata", "created_at",
            "valid_from", "invalid_at", "superseded_by", "access_count", "happened_at",
            "happened_precision")
    out = {k: row.get(k) for k in keep}
    out["scope"] = outer(tenant_id, str(row["scope"]))
    return out


async def recall(
    kn: Knowledge, tenant_id: str, *, scope: str, query: str, k: int, user_id: str,
    include_superseded: bool,
) -> list[dict[str, Any]]:
    hits = await kn.memory.recall(inner(tenant_id, scope, "scope"), query, k, user_id,
                                  include_superseded)
    return [dict(h.to_dict(), scope=scope) for h in hits]


async def browse(
    kn: Knowledge, tenant_id: str, *, scope: str | None, user_id: str | None, limit: int
) -> dict[str, Any]:
    stored = inner(tenant_id, scope, "scope") if scope else None
    scopes = await tenant_scopes(kn.db, prefix(tenant_id))
    rows = await tenant_memories(kn.db, prefix(tenant_id), scope=stored, user_id=user_id,
                                 limit=limit)
    return {"scopes": [dict(s, scope=outer(tenant_id, s["scope"])) for s in scopes],
            "memories": [memory_row(tenant_id, r) for r in rows]}


async def forget(kn: Knowledge, tenant_id: str, memory_id: str) -> None:
    if not await kn.memory.forget(check_id(memory_id), scope_prefix=prefix(tenant_id)):
        raise NotFound(f"memory {memory_id} does not exist", field="memory_id")


async def compact_scope(
    kn: Knowledge, tenant_id: str, *, scope: str, older_than_days: float, max_access: int
) -> dict[str, Any]:
    result = await compact(kn.memory, inner(tenant_id, scope, "scope"), older_than_days,
                           max_access)
    return {"archived": result.archived, "summaries": result.summaries}


async def cache_lookup(kn: Knowledge, tenant_id: str, *, question: str, scope: str) -> dict[str, Any]:
    if not question.strip():
        raise ValidationError("the question is empty", field="question")
    result = await kn.cache.explain(question, inner(tenant_id, scope, "scope"))
    if hasattr(result, "answer"):
        return {"hit": True, **result.__dict__}
    return {"hit": False, **result.__dict__}
