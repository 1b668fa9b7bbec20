"""A run's files: inputs placed in its workspace before its first step, outputs kept at its end.

Inputs are staged before the run exists: their bytes go to the object store as
content-addressed blobs (:func:`stage`), and the submission records them (path, size,
sha256) as the run's ``input`` rows in the same transaction as the run
(:func:`record_inputs`), so no worker ever sees the run without them. The worker that
opens the run's workspace for the first time (no snapshot to restore) writes them in
(:func:`place_inputs`) through :mod:`onebox.sandbox.workspace` (no symlink followed).

Outputs (deliverables) are the files the run's last successful step that wrote files
left in the workspace. When the run's session is released they are read through
:mod:`onebox.sandbox.hostfs` (regular files only, never through a symlink, bounded
count and bytes), stored as blobs and recorded as ``output`` rows with the step and
execution that wrote them (:func:`collect_outputs`), so they outlive the workspace.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from onebox.config import RuntimeSettings
from onebox.errors import NotFound, SandboxError, ValidationError
from onebox.objects.base import ObjectStore, blob_key
from onebox.sandbox import hostfs
from onebox.sandbox.base import ExecRequest, SandboxBackend
from onebox.sandbox.workspace import write_files
from onebox.store import runs as store
from onebox.store.db import Database
from onebox.store.queries import load_queries
from onebox.store.snapshots import GC_LOCK_KEY

log = logging.getLogger(__name__)
Q = load_queries("run_files")
MAX_PATH_CHARS = 512
RESERVED_TOP = frozenset({".onebox", "lost+found"})


@dataclass(frozen=True)
class RunFile:
    """One file of a run: where it sits in the workspace and which blob holds its bytes."""

    path: str
    sha256: str
    size_bytes: int
    # a sparse file: where its data runs go, and the hash of those runs (its blob's)
    extents: tuple[tuple[int, int], ...] | None = None
    data_sha256: str | None = None


def check_name(path: str, *, field: str = "files") -> str:
    """The workspace path a file is placed at, normalised; ValidationError naming ``field``
    for an absolute path, ``..``, a reserved top directory, control characters or length."""
    try:
        names = hostfs.parts(path.replace("\\", "/"))
    except hostfs.Refused:
        names = []
    bad = (not names or names[0] in RESERVED_TOP or len(path) > MAX_PATH_CHARS
           or any(ord(ch) < 32 for ch in path))
    if bad:
        raise ValidationError(
            f"file name {path!r} is refused: use a relative path inside the workspace (no "
            f"'..', no leading '/', not under .onebox/, at most {MAX_PATH_CHARS} characters)",
            field=field)
    return "/".join(names)


def check_caps(sizes: Sequence[int], limits: RuntimeSettings, *, field: str = "files") -> None:
    """Count and byte caps on a run's inputs (settings runtime.max_input_files/_bytes)."""
    if len(sizes) > limits.max_input_files:
        raise ValidationError(
            f"{len(sizes)} files given; a run takes at most {limits.max_input_files} "
            "(ONEBOX_RUNTIME__MAX_INPUT_FILES); pack them in an archive", field=field)
    if sum(sizes) > limits.max_input_bytes:
        raise ValidationError(
            f"the files given hold {sum(sizes)} bytes; a run takes at most "
            f"{limits.max_input_bytes} (ONEBOX_RUNTIME__MAX_INPUT_BYTES)", field=field)


def local_files(paths: Sequence[Path], limits: RuntimeSettings) -> list[tuple[str, Path]]:
    """(workspace name, local path) of each regular file given: a file by its name, a
    directory's files under the directory's name. Symlinks inside a directory are skipped."""
    found: list[tuple[str, Path]] = []
    for given in paths:
        if given.is_dir():
            found.extend(_dir_files(given))
        elif given.is_file():
            found.append((given.name, given))
        else:
            raise ValidationError(f"--file {given}: no such file or directory", field="file")
    names = [check_name(name, field="file") for name, _ in found]
    if len(set(names)) != len(names):
        raise ValidationError("two files given would land at the same workspace path; "
                              "rename one", field="file")
    check_caps([p.stat().st_size for _, p in found], limits, field="file")
    return list(zip(names, (p for _, p in found), strict=True))


def _dir_files(top: Path) -> list[tuple[str, Path]]:
    base = top.resolve().name or "files"
    out = []
    for dirpath, _dirs, files in os.walk(top, followlinks=False):
        for name in sorted(files):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                out.append((f"{base}/{path.relative_to(top).as_posix()}", path))
    return out


async def stage(db: Database, objects: ObjectStore, tenant_id: str, name: str,
                data: bytes | Path) -> tuple[uuid.UUID, RunFile]:
    """Store the bytes (or a file the server staged, never read whole) as a blob and an
    upload row naming it, under the object GC's shared lock (the GC never sees the blob
    without its row); the upload id and its RunFile."""
    if isinstance(data, Path):
        digest, size = await asyncio.to_thread(_digest_of, data)
    else:
        digest, size = hashlib.sha256(data).hexdigest(), len(data)
    staged, upload_id = RunFile(name, digest, size), uuid.uuid4()
    async with db.transaction() as conn:
        await conn.execute(Q["lock_gc_shared"], {"key": GC_LOCK_KEY})
        if not isinstance(data, Path):
            await objects.put_blob(data)
        elif not await objects.exists(blob_key(digest)):
            await objects.put_file(blob_key(digest), data)
        await conn.execute(Q["insert_upload"], {
            "id": upload_id, "tenant_id": tenant_id, "path": name, "sha256": staged.sha256,
            "size_bytes": staged.size_bytes})
    return upload_id, staged


async def stage_local(db: Database, objects: ObjectStore, paths: Sequence[Path],
                      limits: RuntimeSettings, tenant_id: str = "default") -> list[RunFile]:
    """`onebox run --file`: check, read and stage local files and directories."""
    found = await asyncio.to_thread(local_files, paths, limits)
    staged = []
    for name, path in found:
        data = await asyncio.to_thread(path.read_bytes)
        staged.append((await stage(db, objects, tenant_id, name, data))[1])
    return staged


async def record_inputs(conn: store.Conn, run_id: uuid.UUID, inputs: Sequence[RunFile]) -> None:
    """The run's input rows; call in the transaction that inserts the run."""
    for f in inputs:
        await insert_file(conn, run_id, "input", f, None, None)


async def insert_file(conn: store.Conn, run_id: uuid.UUID, kind: str, f: RunFile,
                  step_id: str | None, execution_id: uuid.UUID | None) -> None:
    await conn.execute(Q["insert_run_file"], {
        "run_id": run_id, "kind": kind, "path": f.path, "sha256": f.sha256,
        "size_bytes": f.size_bytes, "step_id": step_id, "execution_id": execution_id,
        "extents": None if f.extents is None else Jsonb([list(x) for x in f.extents]),
        "data_sha256": f.data_sha256})


async def listed(db: Database, run_id: uuid.UUID, kind: str) -> list[dict[str, Any]]:
    async with db.connection() as conn:
        cur = await conn.execute(Q["run_files"], {"run_id": run_id, "kind": kind})
        return list(await cur.fetchall())


async def place_inputs(db: Database, objects: ObjectStore, backend: SandboxBackend,
                       row: store.Row) -> int:
    """Write the run's inputs into its new workspace (opened here, as the backend makes
    it); returns how many were written. Each blob is checked against its sha256."""
    inputs = await listed(db, row["run_id"], "input")
    if not inputs:
        return 0
    files = {r["path"]: await objects.get_verified(blob_key(r["sha256"]), r["sha256"])
             for r in inputs}
    session_id = row["session_id"]
    opened = await backend.execute(ExecRequest(session_id=session_id, code=":", language="bash"))
    if not opened.ok:
        raise SandboxError(f"could not open the workspace of run {row['run_id']} to place its "
                           f"input files: {opened.error or opened.stderr}")
    workspace = backend.workspace(session_id)
    async with backend.hold(session_id):
        st = await asyncio.to_thread(os.stat, workspace)
        await asyncio.to_thread(write_files, workspace, files, (st.st_uid, st.st_gid))
    return len(files)


def _digest_of(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


async def save_upload(db: Database, objects: ObjectStore, tenant_id: str, name: str,
                      data: bytes | Path, limits: RuntimeSettings) -> dict[str, Any]:
    """POST /v1/uploads: one file kept for the tenant until a run names it by id (``data``
    may be a file the server staged)."""
    path = check_name(name, field="files")
    size = (await asyncio.to_thread(data.stat)).st_size if isinstance(data, Path) else len(data)
    check_caps([size], limits)
    upload_id, staged = await stage(db, objects, tenant_id, path, data)
    return {"id": upload_id, "path": path, "sha256": staged.sha256,
            "size_bytes": staged.size_bytes}


async def uploaded(db: Database, tenant_id: str, ids: Sequence[uuid.UUID],
                   limits: RuntimeSettings) -> list[RunFile]:
    """The tenant's uploads named by a run request, as its inputs (NotFound for an id that
    is not the tenant's: another tenant's uploads are never reachable)."""
    if not ids:
        return []
    async with db.connection() as conn:
        cur = await conn.execute(Q["tenant_uploads"], {"tenant_id": tenant_id,
                                                       "ids": list(ids)})
        rows = {r["id"]: r for r in await cur.fetchall()}
    missing = [str(i) for i in ids if i not in rows]
    if missing:
        raise NotFound(f"upload {missing[0]} not found; upload the file with POST /v1/uploads "
                       "and name the id it returns", field="files")
    files = [RunFile(rows[i]["path"], rows[i]["sha256"], rows[i]["size_bytes"]) for i in ids]
    if len({f.path for f in files}) != len(files):
        raise ValidationError("two uploads have the same path; a run's files need distinct "
                              "names", field="files")
    check_caps([f.size_bytes for f in files], limits)
    return files
