"""Reading a sandbox workspace from the host without trusting it.

Sandboxed code owns the workspace, so every name in it may be a symlink planted
to point at host files, or be swapped for one while we look. Listing and reading
go through :mod:`onebox.sandbox.hostfs` (directory fds, no symlink followed on any
component, only regular files opened); a listing stops at ``MAX_LIST`` entries,
``MAX_LIST_DEPTH`` levels or ``LIST_DEADLINE_S``, and a download is streamed from
the file's fd in chunks, read in a thread.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from onebox.errors import NotFound, ValidationError
from onebox.sandbox import hostfs

MAX_LIST = 5000
MAX_LIST_DEPTH = 64
LIST_DEADLINE_S = 5.0
MAX_READ_BYTES = 256 << 20
CHUNK_BYTES = 1 << 20
LIST_BOUNDS = hostfs.Bounds(MAX_LIST, MAX_LIST_DEPTH, LIST_DEADLINE_S)


def safe_parts(relpath: str) -> list[str]:
    """hostfs's rule for a path beneath the workspace, as the API's ValidationError."""
    try:
        parts = hostfs.parts(relpath)
    except hostfs.Refused:
        parts = []
    if not parts:
        raise ValidationError(f"file path {relpath!r} must be relative and stay inside the "
                              "workspace", field="path")
    return parts


def list_files(root: Path) -> list[dict[str, Any]]:
    """Regular files, directories and symlinks under root (never followed), sorted by path;
    the first ``MAX_LIST`` met when the workspace holds more (or is deeper, or slower)."""
    out: list[dict[str, Any]] = []
    try:
        with hostfs.root(root) as root_fd:
            for item in hostfs.walk(root_fd, LIST_BOUNDS, pruned=[]):
                out.append({"path": item.path, "type": item.kind,
                            "size": item.st.st_size if item.kind == "file" else None,
                            "modified_at": item.st.st_mtime})
    except hostfs.BoundExceeded:
        pass
    except OSError:  # no workspace (yet, or any more)
        return []
    return sorted(out, key=lambda f: f["path"])


def open_file(root: Path, relpath: str) -> tuple[int, int]:
    """(fd, size) of one regular file in the workspace; symlinks anywhere on the path refuse."""
    clean = "/".join(safe_parts(relpath))
    try:
        with hostfs.root(root) as root_fd:
            fd, st = hostfs.open_regular(root_fd, clean)
    except OSError:
        raise NotFound(f"file {relpath!r} does not exist or is not a regular file",
                       field="path") from None
    if st.st_size > MAX_READ_BYTES:
        os.close(fd)
        raise ValidationError(f"{relpath!r} is {st.st_size} bytes; the API serves files up "
                              f"to {MAX_READ_BYTES} bytes", field="path")
    return fd, st.st_size


def read_file(root: Path, relpath: str) -> bytes:
    """The bytes of one regular file (at most ``MAX_READ_BYTES``)."""
    fd, _size = open_file(root, relpath)
    with hostfs.opened(fd):
        return _read_upto(fd, MAX_READ_BYTES)


def _read_upto(fd: int, max_bytes: int) -> bytes:
    chunks, total = [], 0
    while total < max_bytes and (chunk := os.read(fd, min(CHUNK_BYTES, max_bytes - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


async def stream_fd(fd: int, size: int) -> AsyncIterator[bytes]:
    """The first ``size`` bytes of ``fd`` in chunks, each read in a thread; closes ``fd``."""
    try:
        left = size
        while left > 0:
            chunk = await asyncio.to_thread(os.read, fd, min(CHUNK_BYTES, left))
            if not chunk:
                raise OSError(errno.EIO, "the file shrank while it was being sent")
            left -= len(chunk)
            yield chunk
    finally:
        os.close(fd)
