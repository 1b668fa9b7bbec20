"""Sandbox sessions owned by a tenant: create, execute, files in and out, delete, snapshots.

The one service every front door uses (HTTP, CLI `onebox exec`, MCP, the E2B endpoints).
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from onebox.config import SandboxSettings, Settings
from onebox.errors import Conflict, NotFound, SandboxError
from onebox.objects import ObjectStore
from onebox.runtime.engine.sessions import (
    reclaim_abandoned as reclaim_abandoned,  # re-exported for front doors
)
from onebox.runtime.environments import service as environments
from onebox.runtime.services import tenant_sessions as rows
from onebox.runtime.services.cell_stream import by_lines, cell_events
from onebox.runtime.services.cell_stream import (
    cell_json as cell_json,  # re-exported for front doors
)
from onebox.runtime.services.workspace_files import list_files, open_file, safe_parts
from onebox.sandbox.base import (
    CellOutput,
    CellRequest,
    CellResult,
    ExecRequest,
    ExecResult,
    Limits,
    NetworkPolicy,
    OutputSink,
    SandboxBackend,
)
from onebox.sandbox.snapshot_tar import snapshot_tar_gz
from onebox.sandbox.snapshots import load_manifest
from onebox.snapshots.replay import restore_into_session
from onebox.store.db import Database


def new_session_id() -> str:
    return f"api-{secrets.token_hex(8)}"


async def create_session(db: Database, backend: SandboxBackend, tenant_id: str,
                         environment: str | None = None, *, holder: str | None = None,
                         owned: bool = False,
                         e2b: rows.E2bFields | None = None) -> dict[str, Any]:
    """A new session; with ``environment`` (a built one), every call runs with its layer.
    ``holder``: the API server creating it (requests to other servers are routed to it).
    ``owned``: this process ends it when its call does (`onebox exec`'s own session); if
    the process dies first, the next one on its sandbox dir reclaims it
    (:func:`reclaim_abandoned`)."""
    chosen = None if environment is None else await environments.layer(
        db, environments.backend_settings(backend), tenant_id, environment)
    row = await rows.insert_session(db, new_session_id(), backend.name, tenant_id,
                                    session_share(backend), holder=holder,
                                    owner=backend.local_owner() if owned else None, e2b=e2b)
    if chosen is not None:
        await environments.set_session_environment(db, row["id"], chosen)
    return {**row, "environment": environments.layer_json(chosen)}


def session_share(backend: SandboxBackend) -> int:
    """The live sessions one tenant may hold (the operator's setting of this backend)."""
    settings = getattr(backend, "settings", None)
    sandbox = settings.sandbox if isinstance(settings, Settings) else SandboxSettings()
    return sandbox.max_sessions_per_tenant


async def require_session(db: Database, session_id: str, tenant_id: str) -> dict[str, Any]:
    row = await rows.tenant_session(db, session_id, tenant_id)
    if row is None:
        raise NotFound(f"session {session_id} does not exist (or was deleted)", field="session_id")
    return row


async def execute(
    db: Database, backend: SandboxBackend, session_id: str, *, code: str, language: str,
    timeout_s: float | None, memory_mb: int | None, allow_domains: list[str],
    stdin: str | None, files: dict[str, bytes | Path] | None = None,
) -> ExecResult:
    request = ExecRequest(
        session_id=session_id, code=code, language=language,  # type: ignore[arg-type]
        files=files or {}, stdin=stdin.encode() if stdin is not None else None,
        limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb),
        network=NetworkPolicy(allow_domains=tuple(allow_domains)),
        environment=await environments.session_layer(db, backend, session_id))
    await rows.touch_session(db, session_id)
    return await backend.execute(request)


async def run_cell(
    db: Database, backend: SandboxBackend, session_id: str, *, code: str,
    timeout_s: float | None = None, memory_mb: int | None = None,
    allow_domains: list[str] | None = None, env: dict[str, str] | None = None,
    on_output: OutputSink | None = None, on_result: Callable[[CellOutput], None] | None = None,
) -> CellResult:
    """Python in the session's stateful interpreter: variables, imports and open files
    persist between calls (the backend starts it on first use)."""
    request = CellRequest(
        session_id=session_id, code=code, limits=Limits(timeout_s=timeout_s, memory_mb=memory_mb),
        network=NetworkPolicy(allow_domains=tuple(allow_domains or ())), env=env or {},
        on_output=on_output, on_result=on_result,
        environment=await environments.session_layer(db, backend, session_id))
    await rows.touch_session(db, session_id)
    return await backend.run_cell(request)


def stream_cell(
    db: Database, backend: SandboxBackend, session_id: str, *, code: str,
    timeout_s: float | None = None, memory_mb: int | None = None,
    allow_domains: list[str] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The same call as :func:`run_cell` as events: ``{"type": "stdout"|"stderr", "text"}``
    and ``{"type": "result", "data", "is_main_result"}`` as they happen, then
    ``{"type": "end", "result": cell_json(...)}``; printed text comes in whole lines
    (:func:`cell_stream.by_lines`), so a callback never gets half a line."""
    async def run(on_output: OutputSink, on_result: Callable[[CellOutput], None]) -> CellResult:
        return await run_cell(db, backend, session_id, code=code, timeout_s=timeout_s,
                              memory_mb=memory_mb, allow_domains=allow_domains,
                              on_output=on_output, on_result=on_result)
    return by_lines(cell_events(run), split=False)


def result_json(result: ExecResult) -> dict[str, Any]:
    data = asdict(result)
    data["enforcement"] = dict(result.enforcement)
    data["cpu_percent"] = result.cpu_percent
    return data


async def upload(
    db: Database, backend: SandboxBackend, session_id: str, path: str, data: bytes | Path
) -> dict[str, Any]:
    """Write one file into the workspace through the backend (its owner, its disk quota);
    a ``Path`` is a file the server staged, copied in without reading it into memory."""
    clean = "/".join(safe_parts(path))
    result = await execute(db, backend, session_id, code=":", language="bash", timeout_s=30,
                           memory_mb=None, allow_domains=[], stdin=None, files={clean: data})
    if not result.ok:
        raise SandboxError(f"could not write {clean!r} into session {session_id}: "
                           f"{result.error or result.stderr.strip()}")
    size = (await asyncio.to_thread(data.stat)).st_size if isinstance(data, Path) else len(data)
    return {"path": clean, "size": size}


async def files_of(backend: SandboxBackend, session_id: str) -> list[dict[str, Any]]:
    return await asyncio.to_thread(list_files, backend.workspace(session_id))


async def download(backend: SandboxBackend, session_id: str, path: str) -> tuple[int, int]:
    """(fd, size) of a regular file of the workspace, opened safely; the caller streams it."""
    return await asyncio.to_thread(open_file, backend.workspace(session_id), path)


async def delete_session(
    db: Database, backend: SandboxBackend, session_id: str, tenant_id: str
) -> None:
    await backend.cleanup(session_id)
    await rows.release_session(db, session_id, tenant_id)


async def list_sessions(db: Database, tenant_id: str, limit: int = 100) -> list[dict[str, Any]]:
    return await rows.list_sessions(db, tenant_id, limit)


async def require_snapshot(db: Database, snapshot_id: uuid.UUID, tenant_id: str) -> dict[str, Any]:
    row = await rows.tenant_snapshot(db, snapshot_id, tenant_id)
    if row is None:
        raise NotFound(f"snapshot {snapshot_id} does not exist", field="snapshot_id")
    if row["status"] != "READY":
        raise Conflict(f"snapshot {snapshot_id} is still being written", field="snapshot_id")
    return row


async def snapshot_tarball(store: ObjectStore, snapshot: dict[str, Any]) -> AsyncIterator[bytes]:
    """The snapshot (a READY row) as a streamed .tar.gz, every file verified as it is sent.
    The manifest is read first, so a missing or corrupted one is an error before any byte."""
    manifest = await load_manifest(store, str(snapshot["sha256"]).strip())
    return snapshot_tar_gz(store, manifest)


async def restore_to_session(
    db: Database, store: ObjectStore, backend: SandboxBackend, snapshot_id: uuid.UUID | str,
    tenant_id: str, *, holder: str | None = None,
) -> dict[str, Any]:
    """A new session of the tenant whose workspace holds the snapshot (an id or a unique
    prefix of one)."""
    session = await create_session(db, backend, tenant_id, holder=holder)
    restored = await restore_into_session(db, store, backend, snapshot_id,
                                          session_id=session["id"])
    report = restored.report
    return {"session": session, "file_count": report.file_count if report else 0,
            "bytes": report.bytes if report else 0, "workspace": str(restored.workspace),
            "skipped_symlinks": list(report.skipped_symlinks) if report else [],
            "sha256": report.sha256 if report else None}
