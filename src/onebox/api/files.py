"""Reading a sandbox workspace from the host without trusting it.

Sandboxed code owns the workspace, so every name in it may be a symlink
planted to point at host files. Listing uses ``lstat`` only; reading opens each
path component with ``O_NOFOLLOW`` relative to its parent directory.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from onebox.errors import NotFound, ValidationError

MAX_LIST = 5000
MAX_READ_BYTES = 256 << 20


def safe_parts(relpath: str) -> list[str]:
    parts = [p for p in relpath.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or relpath.startswith("/") or "\x00" in relpath:
        raise ValidationError(f"file path {relpath!r} must be relative and stay inside the "
                              "workspace", field="path")
    return parts


def list_files(root: Path) -> list[dict[str, Any]]:
    """Regular files, directories and symlinks under root (never followed), sorted by path."""
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    stack = [""]
    while stack and len(out) < MAX_LIST:
        rel = stack.pop()
        try:
            entries = sorted(os.scandir(root / rel) if rel else os.scandir(root),
                             key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
                kind = "dir"
            else:
                kind = "file" if stat.S_ISREG(st.st_mode) else \
                    "symlink" if stat.S_ISLNK(st.st_mode) else "other"
            out.append({"path": path, "type": kind,
                        "size": st.st_size if kind == "file" else None,
                        "modified_at": st.st_mtime})
    return sorted(out, key=lambda f: f["path"])


def read_file(root: Path, relpath: str) -> bytes:
    """The bytes of one regular file in the workspace; symlinks anywhere on the path refuse."""
    parts = safe_parts(relpath)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        raise NotFound(f"file {relpath!r} does not exist (the workspace is empty)",
                       field="path") from None
    try:
        for name in parts[:-1]:
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        raise NotFound(f"file {relpath!r} does not exist or is not a regular file",
                       field="path") from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    with os.fdopen(leaf, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise NotFound(f"{relpath!r} is not a regular file", field="path")
        if st.st_size > MAX_READ_BYTES:
            raise ValidationError(f"{relpath!r} is {st.st_size} bytes; the API serves files up "
                                  f"to {MAX_READ_BYTES} bytes", field="path")
        return handle.read(MAX_READ_BYTES + 1)[:MAX_READ_BYTES]
