"""/v1/sessions: sandbox sessions of the caller's tenant, and /v1/snapshots."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse

from onebox.api.auth import Caller, State
from onebox.api.schemas import CreateSession, Execute
from onebox.api.staging import UPLOAD_RESPONSES, file_parts, form_doc, staged_upload, text_part
from onebox.errors import OneboxError, ValidationError
from onebox.runtime.services import session_service as service
from onebox.runtime.services import tenant_sessions
from onebox.runtime.services.workspace_files import stream_fd

router = APIRouter(tags=["sessions"])
SessionId = Annotated[str, PathParam(pattern=r"^api-[0-9a-f]{16}$")]
MAX_PATH_CHARS = 1024


@router.post("/v1/sessions", status_code=201, summary="Create a sandbox session")
async def create_session(state: State, caller: Caller,
                         body: CreateSession | None = None) -> dict[str, Any]:
    environment = body.environment if body is not None else None
    return await service.create_session(state.db, state.backend, caller.tenant_id,
                                        environment=environment, holder=state.server_id)


@router.get("/v1/sessions", summary="The tenant's live sessions")
async def list_sessions(state: State, caller: Caller) -> dict[str, Any]:
    return {"sessions": await service.list_sessions(state.db, caller.tenant_id)}


NDJSON = "application/x-ndjson"


@router.post("/v1/sessions/{session_id}/execute", summary="Run code in the session",
             responses={200: {"content": {NDJSON: {}}}})
async def execute(session_id: SessionId, body: Execute, state: State, caller: Caller,
                  accept: Annotated[str, Header()] = "application/json") -> Any:
    """python: the session's stateful interpreter (``stateless`` for a one-shot run);
    ``Accept: application/x-ndjson`` streams its output and results as they happen."""
    await service.require_session(state.db, session_id, caller.tenant_id)
    if body.language == "python" and not body.stateless:
        return await _run_cell(session_id, body, state, stream=NDJSON in accept)
    result = await service.execute(
        state.db, state.backend, session_id, code=body.code, language=body.language,
        timeout_s=body.timeout_s, memory_mb=body.memory_mb, allow_domains=body.allow_domains,
        stdin=body.stdin)
    return service.result_json(result)


async def _run_cell(session_id: str, body: Execute, state: State, stream: bool) -> Any:
    if body.stdin is not None:
        raise ValidationError("stdin is for one-shot runs: set \"stateless\": true, or drop "
                              "stdin (the interpreter reads no input)", field="stdin")
    options: dict[str, Any] = {"code": body.code, "timeout_s": body.timeout_s,
                               "memory_mb": body.memory_mb, "allow_domains": body.allow_domains}
    if not stream:
        result = await service.run_cell(state.db, state.backend, session_id, **options)
        return service.cell_json(result)
    events = service.stream_cell(state.db, state.backend, session_id, **options)
    return StreamingResponse(_ndjson(events), media_type=NDJSON)


async def _ndjson(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """One JSON object a line; a call that fails after the 200 ends with an ``error`` line."""
    try:
        async for event in events:
            yield json.dumps(event).encode() + b"\n"
    except OneboxError as exc:
        yield json.dumps({"type": "error", "error": exc.to_dict()}).encode() + b"\n"


@router.post("/v1/sessions/{session_id}/files", status_code=201,
             summary="Upload a file into the session's workspace",
             openapi_extra=form_doc({"file": False}, {"path": MAX_PATH_CHARS}),
             responses=UPLOAD_RESPONSES)
async def upload(session_id: SessionId, request: Request, state: State,
                 caller: Caller) -> dict[str, Any]:
    """Multipart ``file`` (and optionally ``path``, else the file's name); staged on disk as
    it arrives (api/staging), then copied into the workspace, never held whole in memory."""
    await service.require_session(state.db, session_id, caller.tenant_id)
    async with staged_upload(request, state, caller.tenant_id) as staging:
        parts = await staging.form(file_fields={"file"})
        path = text_part(parts, "path", MAX_PATH_CHARS)
        file = file_parts(parts, "file")[-1]
        assert file.path is not None  # file_parts checked it
        return await service.upload(state.db, state.backend, session_id,
                                    path or file.filename or "upload", file.path)


@router.get("/v1/sessions/{session_id}/files", summary="List the session's files")
async def files(session_id: SessionId, state: State, caller: Caller) -> dict[str, Any]:
    await service.require_session(state.db, session_id, caller.tenant_id)
    return {"files": await service.files_of(state.backend, session_id)}


@router.get("/v1/sessions/{session_id}/files/{path:path}", response_class=Response,
            summary="Download one file", responses={200: {"content": {
                "application/octet-stream": {}}}})
async def download(session_id: SessionId, path: str, state: State, caller: Caller) -> Response:
    await service.require_session(state.db, session_id, caller.tenant_id)
    fd, size = await service.download(state.backend, session_id, path)
    return StreamingResponse(stream_fd(fd, size), media_type="application/octet-stream",
                             headers={"Content-Length": str(size)})


@router.delete("/v1/sessions/{session_id}", status_code=204, response_class=Response,
               summary="Delete the session and its workspace")
async def delete(session_id: SessionId, state: State, caller: Caller) -> Response:
    await service.require_session(state.db, session_id, caller.tenant_id)
    await service.delete_session(state.db, state.backend, session_id, caller.tenant_id)
    return Response(status_code=204)


@router.get("/v1/snapshots", tags=["snapshots"], summary="The tenant's workspace snapshots")
async def list_snapshots(
    state: State, caller: Caller, run_id: uuid.UUID | None = None,
    session_id: Annotated[str | None, Query(max_length=140, pattern=r"^[A-Za-z0-9_.-]+$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    rows = await tenant_sessions.tenant_snapshots(state.db, caller.tenant_id, run_id=run_id,
                                                  session_id=session_id, limit=limit)
    return {"snapshots": rows}


@router.get("/v1/snapshots/{snapshot_id}/download", tags=["snapshots"], response_class=Response,
            summary="The snapshot as a streamed .tar.gz (every object verified as it is sent)",
            responses={200: {"content": {"application/gzip": {}}}})
async def download_snapshot(snapshot_id: uuid.UUID, state: State, caller: Caller) -> Response:
    row = await service.require_snapshot(state.db, snapshot_id, caller.tenant_id)
    body = await service.snapshot_tarball(state.objects(), row)
    return StreamingResponse(body, media_type="application/gzip", headers={
        "Content-Disposition": f'attachment; filename="snapshot-{snapshot_id}.tar.gz"'})


@router.post("/v1/snapshots/{snapshot_id}/restore", tags=["snapshots"], status_code=201,
             summary="Restore a snapshot into a new session")
async def restore_snapshot(snapshot_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    await service.require_snapshot(state.db, snapshot_id, caller.tenant_id)
    return await service.restore_to_session(state.db, state.objects(), state.backend,
                                            snapshot_id, caller.tenant_id,
                                            holder=state.server_id)
