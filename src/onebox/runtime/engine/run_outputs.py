"""A run's deliverables: kept in the object store when its workspace is released.

The outputs are the workspace files matching the plan's declared ``outputs:`` (paths or
globs, ``*`` crossing ``/``; a walk that never descends through a symlink), else the
files the run's last successful step that wrote files left behind (its
``files_written``, deleted ones and ``.onebox/`` excluded). When the run's session
is released (:func:`onebox.runtime.engine.sessions.release_finished_sessions`), each is
recorded as an ``output`` row of ``run_files`` with the step and execution that wrote it.
With the run's files as one history (``snapshot_policy: always``) they are the entries of
its head: nothing is read again, their blobs are the snapshots' (a sparse file keeps only
its data runs, with its extents). Otherwise each is read from the workspace through
:mod:`onebox.sandbox.hostfs` (regular files only, never through a symlink on any
component: sandboxed code may have planted one) and stored as a content-addressed blob. Bounded by ``runtime.max_output_files`` and
``runtime.max_output_bytes``; a file past a bound, or that is not a regular file, is
skipped and named in the ``outputs_kept`` event.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import os
import uuid
import zipfile
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from onebox.config import RuntimeSettings
from onebox.errors import IntegrityError, NotFound, OneboxError
from onebox.objects.base import ObjectStore, blob_key
from onebox.runtime.engine.run_files import Q, RunFile, check_name, insert_file
from onebox.sandbox import hostfs
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.snapshot_manifest import Manifest
from onebox.store import runs as store
from onebox.store.db import Database
from onebox.store.snapshots import GC_LOCK_KEY

log = logging.getLogger(__name__)
IO_DIR = ".onebox/"
MATCH_BOUNDS = hostfs.Bounds(max_entries=50_000, max_depth=64, deadline_s=10.0)


@dataclass
class Gathered:
    """What was read from the workspace: (path, bytes) kept, and why others were not."""

    files: list[tuple[str, bytes]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    entries: list[RunFile] = field(default_factory=list)  # kept as stored: nothing read


async def keep_outputs(db: Database, objects: ObjectStore, backend: SandboxBackend,
                       session: store.Row, limits: RuntimeSettings,
                       head: Manifest | None = None) -> int:
    """Keep the run's outputs before its workspace is released; returns how many were kept.
    With the run's ``head`` (its files as one history), they are its entries: nothing is
    read or copied (their blobs are stored, a sparse file's data runs only). Without, they
    are read from the workspace. Idempotent (a second pass keeps nothing new)."""
    run_id: uuid.UUID = session["run_id"]
    workspace = backend.workspace(session["id"])
    declared, chosen = await _chosen(db, run_id, workspace, head)
    if not chosen and not declared:
        return 0
    if head is not None:
        gathered = from_manifest(head, sorted(chosen), limits)
    else:
        gathered = await asyncio.to_thread(gather, workspace, sorted(chosen), limits)
    async with db.transaction() as conn:
        await conn.execute(Q["lock_gc_shared"], {"key": GC_LOCK_KEY})
        for name, data in gathered.files:
            staged = RunFile(name, *(await _blob(objects, data)))
            await insert_file(conn, run_id, "output", staged, *chosen[name])
        for kept in gathered.entries:
            await insert_file(conn, run_id, "output", kept, *chosen[kept.path])
        await store.append_event(conn, run_id, "outputs_kept", {
            "files": len(gathered.files), "declared": declared,
            "skipped": gathered.skipped}, trace_id=session["trace_id"],
            session_id=session["id"])
    return len(gathered.files)


Writer = tuple[str | None, uuid.UUID | None]


async def _chosen(db: Database, run_id: uuid.UUID, workspace: Path,
                  head: Manifest | None) -> tuple[list[str], dict[str, Writer]]:
    """(the plan's declared outputs, path -> the step and execution that wrote it): the
    files matching the declaration (in ``head``, else in the workspace), else what the last
    writing step wrote."""
    async with db.connection() as conn:
        row = await (await conn.execute(Q["declared_outputs"], {"run_id": run_id})).fetchone()
        declared = [str(p) for p in (row or {}).get("outputs") or ()]
        name = "writing_steps" if declared else "last_writing_step"
        steps = await (await conn.execute(Q[name], {"run_id": run_id})).fetchall()
    if declared and head is not None:
        paths = [e.path for e in head.files() if not e.path.startswith(IO_DIR)
                 and any(fnmatchcase(e.path, p) for p in declared)]
        return declared, {p: _writer(steps, p) for p in paths}
    if declared:
        paths = await asyncio.to_thread(matching, workspace, declared)
        return declared, {p: _writer(steps, p) for p in paths}
    if not steps:
        return [], {}
    last = steps[0]
    return [], {p: (last["step_id"], last["id"]) for p in output_paths(last["files"])}


def _writer(steps: list[store.Row], path: str) -> Writer:
    for s in steps:
        if any(f.get("path") == path for f in s["files"] or ()):
            return s["step_id"], s["id"]
    return None, None


def matching(workspace: Path, patterns: list[str]) -> list[str]:
    """Regular files beneath the workspace whose path matches a pattern (``*`` crosses
    ``/``), never descending through a symlink; bounded like every workspace walk."""
    found: list[str] = []
    try:
        with hostfs.root(workspace) as root_fd:
            for item in hostfs.walk(root_fd, MATCH_BOUNDS, skip_top=frozenset({".onebox"}),
                                    pruned=[]):
                if item.kind == "file" and any(fnmatchcase(item.path, p) for p in patterns):
                    found.append(item.path)
    except (hostfs.BoundExceeded, OSError) as exc:
        log.warning("matching declared outputs in %s stopped: %s", workspace, exc)
    return sorted(found)


async def _blob(objects: ObjectStore, data: bytes) -> tuple[str, int]:
    key = await objects.put_blob(data)
    return key.rsplit("/", 1)[1], len(data)


def output_paths(files: list[dict[str, Any]] | None) -> list[str]:
    """The workspace paths a step wrote that still exist, without onebox's own files."""
    return sorted({f["path"] for f in files or ()
                   if f.get("change") != "deleted" and not f["path"].startswith(IO_DIR)})


def from_manifest(head: Manifest, paths: list[str], limits: RuntimeSettings) -> Gathered:
    """Each path's entry in the run's head, within the count and byte bounds (a sparse file
    counts its data runs: what is stored)."""
    out, budget, entries = Gathered(), limits.max_output_bytes, head.by_path()
    for path in paths:
        entry = entries.get(path)
        if len(out.entries) >= limits.max_output_files:
            out.skipped[path] = f"past max_output_files ({limits.max_output_files})"
        elif entry is None or entry.type != "file" or entry.sha256 is None:
            out.skipped[path] = "not a regular file in the run's files"
        elif entry.stored_size > budget:
            out.skipped[path] = f"past max_output_bytes ({entry.stored_size} bytes, {budget} left)"
        else:
            budget -= entry.stored_size
            out.entries.append(RunFile(path, entry.sha256, entry.size, entry.extents,
                                       entry.data_sha256))
    return out


def gather(workspace: Path, paths: list[str], limits: RuntimeSettings) -> Gathered:
    """Read each path as a regular file beneath the workspace (no symlink followed),
    within the count and byte bounds."""
    try:
        with hostfs.root(workspace) as root_fd:
            return _gather_from(root_fd, paths, limits)
    except OSError:
        return Gathered(skipped={p: "the workspace is gone" for p in paths})


def _gather_from(root_fd: int, paths: list[str], limits: RuntimeSettings) -> Gathered:
    out, budget = Gathered(), limits.max_output_bytes
    for path in paths:
        if len(out.files) >= limits.max_output_files:
            out.skipped[path] = f"past max_output_files ({limits.max_output_files})"
            continue
        why = _read_one(root_fd, path, budget, out)
        if why is None:
            budget -= len(out.files[-1][1])
        else:
            out.skipped[path] = why
    return out


def _read_one(root_fd: int, path: str, budget: int, out: Gathered) -> str | None:
    try:
        name = check_name(path, field="path")
        fd, st = hostfs.open_regular(root_fd, name)
    except OSError as exc:
        return f"not a regular file beneath the workspace ({exc.strerror or exc})"
    except OneboxError as exc:  # a refused name is data, not a failure
        return exc.message
    with hostfs.opened(fd):
        if st.st_size > budget:
            return f"past max_output_bytes ({st.st_size} bytes, {budget} left)"
        out.files.append((name, _read_fd(fd, st.st_size)))
    return None


def _read_fd(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, hostfs.CHUNK_BYTES))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


async def manifest(db: Database, run_id: uuid.UUID) -> list[dict[str, Any]]:
    """The run's kept outputs: path, sha256, size_bytes, step_id, execution_id."""
    async with db.connection() as conn:
        cur = await conn.execute(Q["run_files"], {"run_id": run_id, "kind": "output"})
        rows = await cur.fetchall()
    return [{"path": r["path"], "sha256": r["sha256"], "size_bytes": r["size_bytes"],
             "step_id": r["step_id"], "execution_id": str(r["execution_id"]),
             "created_at": r["created_at"].isoformat()} for r in rows]


async def artifact(db: Database, objects: ObjectStore, run_id: uuid.UUID, path: str) -> bytes:
    """One kept output's bytes, checked against its sha256; NotFound naming the path."""
    name = check_name(path, field="path")
    async with db.connection() as conn:
        cur = await conn.execute(Q["run_file"], {"run_id": run_id, "kind": "output",
                                                 "path": name})
        row = await cur.fetchone()
    if row is None:
        raise NotFound(f"run {run_id} kept no output {path!r}; list them with `onebox files "
                       f"{run_id}` or GET /v1/runs/{run_id}/artifacts", field="path")
    if row["extents"] is None:
        return await objects.get_verified(blob_key(row["sha256"]), row["sha256"])
    data = await objects.get_verified(blob_key(row["data_sha256"]), row["data_sha256"])
    return await asyncio.to_thread(_with_holes, data, row)


def _with_holes(data: bytes, row: store.Row) -> bytes:
    """A sparse output's whole content: its data runs where its extents say, zeros between;
    checked against the whole file's sha256."""
    whole, at = bytearray(int(row["size_bytes"])), 0
    for offset, length in row["extents"]:
        whole[offset:offset + length] = data[at:at + length]
        at += length
    if hashlib.sha256(whole).hexdigest() != row["sha256"]:
        raise IntegrityError(f"kept output {row['path']} does not match its sha256")
    return bytes(whole)


async def artifacts_zip(db: Database, objects: ObjectStore, run_id: uuid.UUID) -> bytes:
    """Every kept output of the run in one zip, with the manifest as ``manifest.json``."""
    rows = await manifest(db, run_id)
    files = [(r["path"], await artifact(db, objects, run_id, r["path"])) for r in rows]
    return await asyncio.to_thread(_zip, rows, files)


def _zip(rows: list[dict[str, Any]], files: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", json.dumps({"files": rows}, indent=2))
        for path, data in files:
            archive.writestr(f"files/{path}", data)
    return buffer.getvalue()
