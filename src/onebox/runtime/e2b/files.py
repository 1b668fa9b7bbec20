"""E2B's filesystem over a session's workspace.

E2B's paths live under ``/home/user`` (its user's home); here that directory *is* the
session's workspace, so ``/home/user/data/a.csv`` (or ``data/a.csv``, relative to the home)
is ``data/a.csv`` in the workspace. Any other absolute path is refused (ValidationError on
``path``). The host reads the workspace without following symlinks
(:mod:`onebox.sandbox.hostfs`, :mod:`onebox.runtime.services.workspace_files`); everything that
changes it (write, make_dir, remove, rename) runs inside the session's sandbox, as its code
would, so a planted symlink can only ever point the sandbox at itself.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from onebox.errors import Conflict, NotFound, SandboxError, ValidationError
from onebox.runtime.services import session_service
from onebox.runtime.services import tenant_sessions as rows
from onebox.runtime.services.workspace_files import LIST_BOUNDS, read_file
from onebox.sandbox import hostfs
from onebox.sandbox.base import ExecRequest, Limits, SandboxBackend
from onebox.store.db import Database

HOME = "/home/user"
OP_TIMEOUT_S = 30.0
MISSING_EXIT = 3
EXISTS_EXIT = 4
Kind = Literal["file", "dir", "symlink", "other"]


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # E2B's absolute path, under HOME
    kind: Kind
    size: int
    mode: int
    modified_s: float
    symlink_target: str | None = None


def to_workspace(path: str, field: str = "path") -> str:
    """The workspace-relative path ('' for the workspace itself) of an E2B path."""
    joined = posixpath.normpath(posixpath.join(HOME, path or "."))
    if joined == HOME:
        return ""
    if not joined.startswith(HOME + "/"):
        raise ValidationError(f"{path!r} is outside the sandbox's home: onebox serves E2B paths "
                              f"under {HOME} (the session's workspace) only", field=field)
    rel = joined[len(HOME) + 1:]
    try:
        hostfs.parts(rel)
    except hostfs.Refused:
        raise ValidationError(f"{path!r} is not a usable file name", field=field) from None
    return rel


def to_e2b(rel: str) -> str:
    return f"{HOME}/{rel}" if rel else HOME


def _entry(rel: str, st: os.stat_result, target: str | None = None) -> Entry:
    return Entry(posixpath.basename(rel) or "user", to_e2b(rel), hostfs.kind_of(st.st_mode),
                 st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime, target)


def _stat(root_fd: int, rel: str) -> Entry:
    if not rel:
        return _entry(rel, os.fstat(root_fd))
    parent, name = hostfs.split_parent(rel)
    with hostfs.opened(hostfs.open_dir(root_fd, parent)) as pfd:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        target = os.readlink(name, dir_fd=pfd) if stat.S_ISLNK(st.st_mode) else None
    return _entry(rel, st, target)


def stat_entry(backend: SandboxBackend, session_id: str, rel: str) -> Entry:
    """One entry of the workspace (a symlink is described, never followed)."""
    try:
        with hostfs.root(backend.workspace(session_id)) as root_fd:
            return _stat(root_fd, rel)
    except OSError:
        raise NotFound(f"{to_e2b(rel)} does not exist", field="path") from None


def list_dir(backend: SandboxBackend, session_id: str, rel: str, depth: int) -> list[Entry]:
    """The entries beneath a directory, ``depth`` levels down (1: its children)."""
    if depth < 1:
        raise ValidationError("depth must be at least 1", field="depth")
    bounds = hostfs.Bounds(LIST_BOUNDS.max_entries, min(depth, LIST_BOUNDS.max_depth),
                           LIST_BOUNDS.deadline_s)
    out: list[Entry] = []
    try:
        with hostfs.root(backend.workspace(session_id)) as root_fd:
            dir_fd = hostfs.open_dir(root_fd, rel) if rel else os.dup(root_fd)
            with hostfs.opened(dir_fd):
                for item in hostfs.walk(dir_fd, bounds, pruned=[]):
                    full = posixpath.join(rel, item.path) if rel else item.path
                    out.append(_entry(full, item.st, item.target))
    except hostfs.BoundExceeded:
        pass
    except OSError:
        raise NotFound(f"directory {to_e2b(rel)} does not exist", field="path") from None
    return out


async def read(backend: SandboxBackend, session_id: str, rel: str) -> bytes:
    if not rel:
        raise ValidationError(f"{HOME} is a directory, not a file", field="path")
    return await asyncio.to_thread(read_file, backend.workspace(session_id), rel)


async def write(db: Database, backend: SandboxBackend, session_id: str, rel: str,
                data: bytes | Path) -> Entry:
    """Write ``data`` (bytes, or a file the server staged) to the workspace's ``rel``."""
    if not rel:
        raise ValidationError(f"{HOME} is a directory; name a file beneath it", field="path")
    written = await session_service.upload(db, backend, session_id, rel, data)
    return Entry(posixpath.basename(rel), to_e2b(rel), "file", written["size"], 0o644, 0.0)


_MAKE_DIR = f'[ -e "$P" ] && exit {EXISTS_EXIT}; mkdir -p -- "$P"'
_REMOVE = 'rm -rf -- "$P"'
_RENAME = (f'[ -e "$P" ] || [ -L "$P" ] || exit {MISSING_EXIT}; '
           'mkdir -p -- "$(dirname -- "$Q")" && mv -T -- "$P" "$Q"')


async def _in_sandbox(db: Database, backend: SandboxBackend, session_id: str, script: str,
                      env: dict[str, str], what: str) -> int:
    """Run a small bash script in the session's sandbox; paths travel in env, never in code."""
    await rows.touch_session(db, session_id)
    result = await backend.execute(ExecRequest(
        session_id=session_id, code=script, language="bash", env=env,
        limits=Limits(timeout_s=OP_TIMEOUT_S)))
    code = result.exit_code
    if code not in (0, MISSING_EXIT, EXISTS_EXIT):
        raise SandboxError(f"could not {what} in sandbox {session_id}: "
                           f"{result.error or result.stderr.strip() or f'exit {code}'}")
    return int(code or 0)


async def make_dir(db: Database, backend: SandboxBackend, session_id: str, rel: str) -> Entry:
    if not rel:
        raise Conflict(f"{HOME} already exists", field="path")
    code = await _in_sandbox(db, backend, session_id, _MAKE_DIR, {"P": rel}, "make a directory")
    if code == EXISTS_EXIT:
        raise Conflict(f"{to_e2b(rel)} already exists", field="path")
    return await asyncio.to_thread(stat_entry, backend, session_id, rel)


async def remove(db: Database, backend: SandboxBackend, session_id: str, rel: str) -> None:
    """Remove a file or a tree; a path that is already gone is no error (as E2B's envd)."""
    if not rel:
        raise ValidationError(f"{HOME} (the workspace) cannot be removed", field="path")
    await _in_sandbox(db, backend, session_id, _REMOVE, {"P": rel}, "remove a file")


async def rename(db: Database, backend: SandboxBackend, session_id: str, src: str,
                 dst: str) -> Entry:
    if not src or not dst:
        raise ValidationError(f"{HOME} itself cannot be renamed", field="path")
    code = await _in_sandbox(db, backend, session_id, _RENAME, {"P": src, "Q": dst}, "rename")
    if code == MISSING_EXIT:
        raise NotFound(f"{to_e2b(src)} does not exist", field="source")
    return await asyncio.to_thread(stat_entry, backend, session_id, dst)
