"""E2B's envd filesystem (``E2B_SANDBOX_URL`` = ``<onebox>/e2b/sandbox``, port 49983):
the ``filesystem.Filesystem`` Connect service and the ``/files`` upload/download endpoint,
over the session's workspace (runtime/e2b_files: paths under /home/user)."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from onebox.api.e2b import connect
from onebox.api.e2b.deps import ENVD_PORT, Target, target
from onebox.api.staging import Staging, staged_upload
from onebox.errors import Conflict, NotFound, OneboxError, ValidationError
from onebox.runtime.e2b import files
from onebox.runtime.e2b.files import Entry
from onebox.runtime.services import session_service
from onebox.runtime.services.workspace_files import stream_fd

router = APIRouter(prefix="/e2b/sandbox", tags=["e2b"], include_in_schema=False)
FILE_TYPES = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY",
              "symlink": "FILE_TYPE_SYMLINK", "other": "FILE_TYPE_UNSPECIFIED"}
MODE_BITS = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK, "other": 0}
Handler = Callable[[Target, dict[str, Any]], Awaitable[dict[str, Any]]]


def entry_json(entry: Entry) -> dict[str, Any]:
    moment = datetime.fromtimestamp(entry.modified_s, UTC)
    body: dict[str, Any] = {
        "name": entry.name, "type": FILE_TYPES[entry.kind], "path": entry.path,
        "size": str(entry.size), "mode": entry.mode,
        "permissions": stat.filemode(MODE_BITS[entry.kind] | entry.mode),
        "owner": "user", "group": "user",
        "modifiedTime": moment.isoformat().replace("+00:00", "Z")}
    if entry.symlink_target is not None:
        body["symlinkTarget"] = entry.symlink_target
    return body


def _path(message: dict[str, Any], name: str = "path") -> str:
    value = message.get(name, "")
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string", field=name)
    return files.to_workspace(value, name)


async def _stat(t: Target, message: dict[str, Any]) -> dict[str, Any]:
    entry = await asyncio.to_thread(files.stat_entry, t.api.backend, t.sandbox_id,
                                    _path(message))
    return {"entry": entry_json(entry)}


async def _list_dir(t: Target, message: dict[str, Any]) -> dict[str, Any]:
    depth = message.get("depth") or 1
    if not isinstance(depth, int):
        raise ValidationError("depth must be a whole number", field="depth")
    rel = _path(message)
    if rel and (await asyncio.to_thread(files.stat_entry, t.api.backend, t.sandbox_id,
                                        rel)).kind != "dir":
        raise ValidationError(f"{files.to_e2b(rel)} is not a directory", field="path")
    found = await asyncio.to_thread(files.list_dir, t.api.backend, t.sandbox_id, rel, depth)
    return {"entries": [entry_json(e) for e in found]}


async def _make_dir(t: Target, message: dict[str, Any]) -> dict[str, Any]:
    entry = await files.make_dir(t.api.db, t.api.backend, t.sandbox_id, _path(message))
    return {"entry": entry_json(entry)}


async def _remove(t: Target, message: dict[str, Any]) -> dict[str, Any]:
    await files.remove(t.api.db, t.api.backend, t.sandbox_id, _path(message))
    return {}


async def _move(t: Target, message: dict[str, Any]) -> dict[str, Any]:
    entry = await files.rename(t.api.db, t.api.backend, t.sandbox_id,
                               _path(message, "source"), _path(message, "destination"))
    return {"entry": entry_json(entry)}


HANDLERS: dict[str, Handler] = {"Stat": _stat, "ListDir": _list_dir, "MakeDir": _make_dir,
                                "Remove": _remove, "Move": _move}


@router.post("/filesystem.Filesystem/{method}")
async def filesystem_rpc(method: str, request: Request) -> Response:
    try:
        handler = HANDLERS.get(method)
        if handler is None:
            raise connect.RpcError("unimplemented", f"filesystem.{method} is not supported by "
                                   "onebox (watching directories is not; see docs/e2b.md)")
        t = await target(request, ENVD_PORT)
        return JSONResponse(await handler(t, await connect.unary_body(request)))
    except Exception as exc:  # noqa: BLE001 # swallow-ok: unary_error re-raises what it does not know (then logged as a 500)
        return connect.unary_error(exc)


def _files_error(exc: OneboxError) -> JSONResponse:
    status = (404 if isinstance(exc, NotFound) else 409 if isinstance(exc, Conflict)
              else 400 if isinstance(exc, ValidationError) else exc.http_status)
    return JSONResponse({"code": status, "message": exc.message}, status_code=status)


@router.get("/files")
async def download(request: Request, path: Annotated[str, Query(max_length=4096)]) -> Response:
    try:
        t = await target(request, ENVD_PORT)
        rel = files.to_workspace(path)
        if not rel:
            raise ValidationError(f"{files.HOME} is a directory, not a file", field="path")
        fd, size = await session_service.download(t.api.backend, t.sandbox_id, rel)
    except OneboxError as exc:
        return _files_error(exc)
    return StreamingResponse(stream_fd(fd, size), media_type="application/octet-stream",
                             headers={"Content-Length": str(size)})


@router.post("/files")
async def upload(request: Request,
                 path: Annotated[str | None, Query(max_length=4096)] = None) -> Response:
    """Each file is staged on disk as it arrives (api/staging), then copied into the
    workspace by the kernel: the server never holds an upload whole in memory."""
    try:
        t = await target(request, ENVD_PORT)
        async with staged_upload(request, t.api, t.tenant_id) as staging:
            written = [await files.write(t.api.db, t.api.backend, t.sandbox_id, rel, data)
                       for rel, data in await _uploaded(request, path, staging)]
    except OneboxError as exc:
        return _files_error(exc)
    return JSONResponse([{"name": e.name, "type": "file", "path": e.path} for e in written])


async def _uploaded(request: Request, path: str | None,
                    staging: Staging) -> list[tuple[str, Path]]:
    """(workspace path, staged file) of each file: an octet-stream body, or multipart parts."""
    if not request.headers.get("content-type", "").startswith("multipart/"):
        if path is None:
            raise ValidationError("an octet-stream upload needs ?path=", field="path")
        if request.headers.get("content-encoding"):
            raise ValidationError("compressed uploads are not supported; write without gzip",
                                  field="Content-Encoding")
        return [(files.to_workspace(path), await staging.body())]
    form = await staging.form(file_fields={"file"})
    found = [part for part in form if part.name == "file"]
    parts = []
    for part in found:
        if part.path is None or part.filename is None:
            raise ValidationError("each multipart 'file' part must be a file", field="file")
        name = path if path is not None and len(found) == 1 else part.filename
        parts.append((files.to_workspace(name or ""), part.path))
    if not parts:
        raise ValidationError("the upload holds no 'file' part", field="file")
    return parts


@router.get("/health", status_code=204, response_class=Response)
async def health(request: Request) -> Response:
    """204 while the caller's sandbox lives; else 502 "... was not found", as E2B's proxy
    answers for a killed or timed-out sandbox (the SDK's ``is_running()`` reads it so)."""
    try:
        await target(request, ENVD_PORT)
    except NotFound:
        sandbox_id = request.headers.get("e2b-sandbox-id", "")[:64]
        return JSONResponse({"code": 502, "message": f"sandbox {sandbox_id!r} was not found"},
                            status_code=502)
    return Response(status_code=204)
