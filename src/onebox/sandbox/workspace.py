"""What a step wrote: request files written in, files written listed out, bounded.

The workspace is written by untrusted code, so every access goes through
:mod:`onebox.sandbox.hostfs` (directory fds, no symlink followed on any component,
no FIFO or device opened). Listing and hashing are bounded: at most
``MAX_SCAN_FILES`` entries, ``MAX_DEPTH`` levels and ``SCAN_DEADLINE_S`` seconds per
listing; a file is hashed only up to ``MAX_HASH_BYTES`` of apparent size and a step's
files together up to ``HASH_BUDGET_BYTES`` (sparse files count in full). Past a bound
the list is cut (``Changes.truncated``) or the file listed without its hash (with a
``note``); the step itself is never failed for it. Run these in a thread
(:func:`state`, :func:`changes_since`): they read files.
"""

from __future__ import annotations

import asyncio
import errno
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from onebox.errors import PolicyViolation
from onebox.sandbox import hostfs
from onebox.sandbox.base import FileChange

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MAX_SCAN_FILES = 50_000
MAX_DEPTH = 128
SCAN_DEADLINE_S = 10.0
MAX_CHANGES = 10_000
MAX_HASH_BYTES = 64 << 20
HASH_BUDGET_BYTES = 256 << 20
BOUNDS = hostfs.Bounds(MAX_SCAN_FILES, MAX_DEPTH, SCAN_DEADLINE_S)


@dataclass(frozen=True)
class FileState:
    size: int
    mtime_ns: int
    inode: int
    ctime_ns: int = 0


class Snapshot(dict[str, FileState]):
    """Path -> state of each regular file and symlink; ``truncated`` names a bound passed."""

    truncated: str | None = None


@dataclass(frozen=True)
class Changes:
    files: tuple[FileChange, ...]
    truncated: bool = False


def check_session_id(session_id: str) -> str:
    if not SESSION_ID.match(session_id) or session_id in {".", ".."}:
        raise PolicyViolation(
            f"invalid session_id {session_id!r}: use 1-128 letters, digits, '_', '-', '.'",
            field="session_id",
        )
    return session_id


def _safe_parts(relpath: str) -> str:
    try:
        names = hostfs.parts(relpath.replace("\\", "/"))
    except OSError:
        names = []
    if not names:
        raise PolicyViolation(
            f"file path {relpath!r} must be relative and stay inside the workspace",
            field="files",
        )
    return "/".join(names)


def write_files(root: Path, files: Mapping[str, bytes | Path],
                owner: tuple[int, int] | None) -> None:
    """Write request files under root without following any symlink in the workspace."""
    with hostfs.root(root) as root_fd:
        for relpath, data in files.items():
            clean = _safe_parts(relpath)
            try:
                hostfs.write_file(root_fd, clean, data, owner=owner)
            except OSError as exc:
                raise PolicyViolation(
                    f"cannot write {relpath!r} into the workspace: {_why(exc)}; a symlink, "
                    "FIFO or non-directory is in the way (remove it in the workspace)",
                    field="files") from exc


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        return "a path component is a symlink or not a directory"
    return exc.strerror or str(exc)


def snapshot(root: Path) -> Snapshot:
    """Path -> (size, mtime, inode) for every regular file and symlink, never followed."""
    state, too_deep = Snapshot(), list[str]()
    try:
        with hostfs.root(root) as root_fd:
            for item in hostfs.walk(root_fd, BOUNDS, skip_top=frozenset({"lost+found"}),
                                    pruned=too_deep):
                if item.kind in ("file", "symlink"):
                    st = item.st
                    state[item.path] = FileState(st.st_size, st.st_mtime_ns, st.st_ino,
                                                 st.st_ctime_ns)
        if too_deep:
            state.truncated = f"max_depth: directories nested deeper than {MAX_DEPTH} levels"
    except hostfs.BoundExceeded as exc:
        state.truncated = f"{exc.bound}: {exc}"
    except OSError:
        state.truncated = "the workspace could not be opened"
    return state


def _hash(root_or_fd: Path | int, relpath: str, budget: int) -> tuple[str | None, str | None]:
    """(sha256, None) or (None, why it was not hashed)."""
    try:
        if isinstance(root_or_fd, Path):
            with hostfs.root(root_or_fd) as root_fd:
                return _hash(root_fd, relpath, budget)
        fd, st = hostfs.open_regular(root_or_fd, relpath)
    except OSError:
        return None, "not a regular file (or it changed while listed)"
    with hostfs.opened(fd):
        if st.st_size > MAX_HASH_BYTES:
            return None, (f"not hashed: {st.st_size} bytes (apparent size) is over the "
                          f"{MAX_HASH_BYTES}-byte hash bound per file")
        if st.st_size > budget:
            return None, (f"not hashed: the step's files passed the {HASH_BUDGET_BYTES}-byte "
                          "hash budget (apparent size)")
        return hostfs.sha256_fd(fd, st.st_size), None


def diff(root: Path, before: Snapshot, after: Snapshot) -> tuple[FileChange, ...]:
    return changes(root, before, after).files


def changes(root: Path, before: Snapshot, after: Snapshot) -> Changes:
    """What changed between two snapshots, with size and sha256 of what exists now.

    A workspace that is gone (its run ended on another worker while this one was
    paused) has nothing left to list: the result says so (truncated), it never raises.
    """
    try:
        with hostfs.root(root) as root_fd:
            return _changes(root_fd, before, after)
    except OSError:
        return Changes((), truncated=True)


def _changes(root_fd: int, before: Snapshot, after: Snapshot) -> Changes:
    out: list[FileChange] = []
    budget = HASH_BUDGET_BYTES
    for path, now in sorted(after.items()):
        old = before.get(path)
        if old == now:
            continue
        if len(out) >= MAX_CHANGES:
            return Changes(tuple(out), truncated=True)
        sha256, note = _hash(root_fd, path, budget)
        budget -= now.size if sha256 is not None else 0
        if old is None:
            out.append(FileChange(path, "created", now.size, sha256, note))
        else:
            out.append(FileChange(path, "modified", now.size, sha256, note))
    gone = [] if after.truncated else sorted(before.keys() - after.keys())
    room = MAX_CHANGES - len(out)
    out += [FileChange(path, "deleted", None, None) for path in gone[:room]]
    return Changes(tuple(out), bool(after.truncated) or len(gone) > room)


async def state(root: Path) -> Snapshot:
    """:func:`snapshot` in a thread: the supervisor's event loop never walks a workspace."""
    return await asyncio.to_thread(snapshot, root)


async def changes_since(root: Path, before: Snapshot) -> Changes:
    """What a step changed since ``before``, computed in a thread."""
    return await asyncio.to_thread(lambda: changes(root, before, snapshot(root)))
