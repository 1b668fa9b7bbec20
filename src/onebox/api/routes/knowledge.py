"""/v1/knowledge, /v1/memory and /v1/cache: the tenant's documents, memories and cached answers."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from onebox.api.auth import Caller, State
from onebox.api.schemas import AddDocument, CacheLookup, Compact, Recall, Remember, Search
from onebox.api.staging import UPLOAD_RESPONSES, file_parts, form_doc, staged_upload, text_part
from onebox.errors import ValidationError
from onebox.knowledge import tenant_service as service

router = APIRouter()


@router.post("/v1/knowledge/documents", status_code=201, tags=["knowledge"],
             summary="Add (or update) a text document")
async def add_document(body: AddDocument, state: State, caller: Caller) -> dict[str, Any]:
    kn = await state.knowledge()
    return await service.add_text(kn, caller.tenant_id, collection=body.collection,
                                  source=body.source, text=body.text, title=body.title,
                                  metadata=body.metadata)


@router.post("/v1/knowledge/upload", status_code=201, tags=["knowledge"],
             summary="Upload a file (text, Markdown, HTML, PDF, DOCX, code) and index it",
             openapi_extra=form_doc({"file": False}, {"collection": 120, "metadata": 20_000}),
             responses=UPLOAD_RESPONSES)
async def upload(request: Request, state: State, caller: Caller) -> dict[str, Any]:
    """The file is staged on disk as it arrives (api/staging: the tenant's upload slots and
    bytes in flight apply), then parsed and indexed."""
    async with staged_upload(request, state, caller.tenant_id) as staging:
        parts = await staging.form(file_fields={"file"})
        (file, *more) = file_parts(parts, "file")
        if more:
            raise ValidationError("send one 'file' part per upload", field="file")
        collection = text_part(parts, "collection", 120) or "default"
        meta = _metadata(text_part(parts, "metadata", 20_000))
        assert file.path is not None  # file_parts checked it
        data = await asyncio.to_thread(file.path.read_bytes)
    kn = await state.knowledge()
    return await service.add_upload(kn, caller.tenant_id, collection=collection,
                                    filename=file.filename or "upload.txt",
                                    data=data, metadata=meta)


def _metadata(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"metadata is not valid JSON: {exc}", field="metadata") from None
    if not isinstance(value, dict) or "\\u0000" in raw or "\x00" in raw:
        raise ValidationError("metadata must be a JSON object without NUL", field="metadata")
    return value


@router.get("/v1/knowledge/documents", tags=["knowledge"],
            summary="The tenant's collections and documents")
async def list_documents(
    state: State, caller: Caller,
    collection: Annotated[str | None, Query(min_length=1, max_length=120)] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> dict[str, Any]:
    kn = await state.knowledge()
    return await service.list_documents(kn, caller.tenant_id, collection, limit)


@router.delete("/v1/knowledge/documents/{document_id}", status_code=204, response_class=Response,
               tags=["knowledge"], summary="Remove a document and its chunks")
async def delete_document(document_id: uuid.UUID, state: State, caller: Caller) -> Response:
    await service.delete_document(await state.knowledge(), caller.tenant_id, document_id)
    return Response(status_code=204)


@router.post("/v1/knowledge/search", tags=["knowledge"],
             summary="Hybrid (full-text + vector) search")
async def search(body: Search, state: State, caller: Caller) -> dict[str, Any]:
    hits = await service.search(await state.knowledge(), caller.tenant_id, query=body.query,
                                k=body.k, collections=body.collections, metadata=body.metadata)
    return {"query": body.query, "hits": hits}


@router.post("/v1/memory", status_code=201, tags=["memory"],
             summary="Remember a fact (a duplicate returns the existing one, deduplicated=true)")
async def remember(body: Remember, state: State, caller: Caller,
                   response: Response) -> dict[str, Any]:
    record = await service.remember(await state.knowledge(), caller.tenant_id, scope=body.scope,
                                    content=body.content, user_id=body.user_id, kind=body.kind,
                                    metadata=body.metadata, happened_at=body.happened_at)
    if record["deduplicated"]:
        response.status_code = 200
    return record


@router.get("/v1/memory", tags=["memory"], summary="Browse memories by scope and user")
async def browse(
    state: State, caller: Caller,
    scope: Annotated[str | None, Query(min_length=1, max_length=120)] = None,
    user_id: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    return await service.browse(await state.knowledge(), caller.tenant_id, scope=scope,
                                user_id=user_id, limit=limit)


@router.post("/v1/memory/recall", tags=["memory"], summary="Recall memories similar to a query")
async def recall(body: Recall, state: State, caller: Caller) -> dict[str, Any]:
    hits = await service.recall(await state.knowledge(), caller.tenant_id, scope=body.scope,
                                query=body.query, k=body.k, user_id=body.user_id,
                                include_superseded=body.include_superseded)
    return {"scope": body.scope, "query": body.query, "memories": hits}


@router.delete("/v1/memory/{memory_id}", status_code=204, response_class=Response,
               tags=["memory"], summary="Forget one memory for good")
async def forget(memory_id: uuid.UUID, state: State, caller: Caller) -> Response:
    await service.forget(await state.knowledge(), caller.tenant_id, str(memory_id))
    return Response(status_code=204)


@router.post("/v1/memory/compact", tags=["memory"],
             summary="Condense old, rarely recalled memories of a scope into summaries")
async def compact(body: Compact, state: State, caller: Caller) -> dict[str, Any]:
    return await service.compact_scope(await state.knowledge(), caller.tenant_id,
                                       scope=body.scope, older_than_days=body.older_than_days,
                                       max_access=body.max_access)


@router.post("/v1/cache/lookup", tags=["cache"],
             summary="Look up a cached answer for a question asked in other words")
async def cache_lookup(body: CacheLookup, state: State, caller: Caller) -> dict[str, Any]:
    return await service.cache_lookup(await state.knowledge(), caller.tenant_id,
                                      question=body.question, scope=body.scope)
