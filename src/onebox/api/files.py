"""Reading a sandbox workspace from the host without trusting it.

Sandboxed code owns the workspace, so every name in it may be a symlink
planted to point at host files. Listing uses ``lstat`` only; reading goes through
:func:`onebox.sandbox.snapshot_files.open_regular` (``O_NOFOLLOW`` on every component).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from onebox.errors import NotFound, ValidationError
from onebox.sandbox.snapshot_files import open_regular

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
        fd = open_regular(root, "/".join(parts))
    except OSError:
        raise NotFound(f"file {relpath!r} does not exist or is not a regular file",
                       field="path") from None
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_READ_BYTES:
            raise ValidationError(f"{relpath!r} is {size} bytes; the API serves files up "
                                  f"to {MAX_READ_BYTES} bytes", field="path")
        return handle.read(MAX_READ_BYTES + 1)[:MAX_READ_BYTES]
