"""Host-side workspace handling that never follows a link planted by sandboxed code.

The workspace is written by untrusted code, so the supervisor treats every name
in it as hostile: files are written through ``openat`` with ``O_NOFOLLOW`` on
each path component, snapshots use ``lstat`` and only hash regular files.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from onebox.errors import PolicyViolation
from onebox.sandbox.base import FileChange

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MAX_SCAN_FILES = 20_000
HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileState:
    size: int
    mtime_ns: int
    inode: int


Snapshot = dict[str, FileState]


def check_session_id(session_id: str) -> str:
    if not SESSION_ID.match(session_id) or session_id in {".", ".."}:
        raise PolicyViolation(
            f"invalid session_id {session_id!r}: use 1-128 letters, digits, '_', '-', '.'",
            field="session_id",
        )
    return session_id


def _safe_parts(relpath: str) -> list[str]:
    parts = [p for p in relpath.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts or relpath.startswith("/"):
        raise PolicyViolation(
            f"file path {relpath!r} must be relative and stay inside the workspace",
            field="files",
        )
    return parts


def write_files(root: Path, files: Mapping[str, bytes], owner: tuple[int, int] | None) -> None:
    """Write request files under root without following any symlink in the workspace."""
    for relpath, data in files.items():
        parts = _safe_parts(relpath)
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for part in parts[:-1]:
                child = _enter_dir(dir_fd, part, owner)
                os.close(dir_fd)
                dir_fd = child
            _write_leaf(dir_fd, parts[-1], data, owner)
        finally:
            os.close(dir_fd)


def _enter_dir(dir_fd: int, name: str, owner: tuple[int, int] | None) -> int:
    """Open (creating if needed) a subdirectory; a symlink or file in its place is refused."""
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
        if owner:
            os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        pass
    except OSError as exc:
        raise PolicyViolation(f"cannot create {name!r}: {exc.strerror}", field="files") from exc
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        raise PolicyViolation(
            f"{name!r} in the workspace is not a directory", field="files"
        ) from exc


def _write_leaf(dir_fd: int, name: str, data: bytes, owner: tuple[int, int] | None) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        raise PolicyViolation(f"cannot write {name!r}: {exc.strerror}", field="files") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PolicyViolation(f"{name!r} in the workspace is not a regular file", field="files")
        os.write(fd, data)
        if owner:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)


def snapshot(root: Path) -> Snapshot:
    """Path -> (size, mtime, inode) for every regular file, without following links."""
    state: Snapshot = {}
    stack = [""]
    while stack and len(state) < MAX_SCAN_FILES:
        rel = stack.pop()
        try:
            entries = list(os.scandir(root / rel if rel else root))
        except OSError:
            continue
        for entry in entries:
            _visit(entry, rel, state, stack)
    return state


def _visit(entry: os.DirEntry[str], rel: str, state: Snapshot, stack: list[str]) -> None:
    path = f"{rel}/{entry.name}" if rel else entry.name
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        if not (rel == "" and entry.name == "lost+found"):
            stack.append(path)
    elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
        state[path] = FileState(st.st_size, st.st_mtime_ns, st.st_ino)


def sha256_of(root: Path, relpath: str) -> str | None:
    """Hash a regular file; None for links, FIFOs, devices or anything that vanished."""
    try:
        fd = os.open(root / relpath, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, HASH_CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def diff(root: Path, before: Snapshot, after: Snapshot) -> tuple[FileChange, ...]:
    """What changed between two snapshots, with size and sha256 of what exists now."""
    changes: list[FileChange] = []
    for path, now in sorted(after.items()):
        old = before.get(path)
        if old == now:
            continue
        if old is None:
            changes.append(FileChange(path, "created", now.size, sha256_of(root, path)))
        else:
            changes.append(FileChange(path, "modified", now.size, sha256_of(root, path)))
    for path in sorted(before.keys() - after.keys()):
        changes.append(FileChange(path, "deleted", None, None))
    return tuple(changes)
