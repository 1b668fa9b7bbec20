"""Reading a workspace that untrusted code wrote: walk it, hash it, copy files out.

Every directory is opened relative to its parent's fd and every file with
``O_NOFOLLOW``, so a symlink planted or swapped in by sandboxed code is recorded as a
symlink and never followed to a host file. Hashes of unchanged files are cached
(:class:`HashCache`), so a big workspace costs little to snapshot at every step.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from pathlib import Path

from onebox.errors import StorageError
from onebox.objects.base import CHUNK_BYTES
from onebox.sandbox.snapshot_manifest import Entry, Manifest

log = logging.getLogger(__name__)

LOST_FOUND = "lost+found"
MAX_ENTRIES = 200_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


def scan(workspace_dir: Path, *, max_entries: int = MAX_ENTRIES) -> Manifest:
    """Walk ``workspace_dir`` (never following symlinks) and hash every regular file.

    A workspace with more than ``max_entries`` entries is refused (StorageError):
    sandboxed code must not be able to make snapshots arbitrarily expensive.
    """
    root = Path(workspace_dir)
    if not root.is_dir():
        return Manifest(())
    entries: list[Entry] = []
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _scan_dir(root_fd, root, "", entries, max_entries)
        finally:
            os.close(root_fd)
    except OSError as exc:
        raise StorageError(f"cannot snapshot workspace {root}: {exc}") from exc
    if os.path.ismount(root):  # a workspace on its own file system: fsck's dir is not data
        entries = [e for e in entries if e.path.split("/")[0] != LOST_FOUND]
    return Manifest(tuple(sorted(entries, key=lambda e: e.path)))


def _scan_dir(dir_fd: int, root: Path, rel: str, out: list[Entry], max_entries: int) -> None:
    """Record the entries under ``dir_fd``; subdirectories are opened relative to it with
    O_NOFOLLOW, so a directory swapped for a symlink mid-scan is never walked into."""
    with os.scandir(dir_fd) as it:
        children = sorted(it, key=lambda d: d.name)
    if len(out) + len(children) > max_entries:
        raise StorageError(
            f"workspace {root} has more than {max_entries} entries; not snapshotting it. "
            "Fix: have the step clean up temporary files, or raise the limit."
        )
    for child in children:
        path = f"{rel}/{child.name}" if rel else child.name
        st = child.stat(follow_symlinks=False)
        mode = stat.S_IMODE(st.st_mode) & 0o777
        if stat.S_ISDIR(st.st_mode):
            out.append(Entry(path, "dir", mode))
            sub_fd = os.open(child.name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                _scan_dir(sub_fd, root, path, out, max_entries)
            finally:
                os.close(sub_fd)
        elif stat.S_ISREG(st.st_mode):
            sha256 = HASHES.get(st) or _hash_at(dir_fd, child.name)
            out.append(Entry(path, "file", mode, st.st_size, sha256))
        elif stat.S_ISLNK(st.st_mode):
            out.append(Entry(path, "symlink", 0,
                             target=os.readlink(child.name, dir_fd=dir_fd)))
        else:
            log.warning("snapshot skips %s/%s: not a file, directory or symlink", root, path)


class HashCache:
    """sha256 of files by (device, inode, size, mtime, ctime), so unchanged files of a big
    workspace are not re-read at every step. The kernel sets ctime on every change and
    code cannot set it back; a file changed less than ``racy_s`` before it was hashed is
    never trusted (two writes within one timestamp tick look alike), as git does."""

    def __init__(self, max_entries: int = 500_000, racy_s: float = 2.0) -> None:
        self.max_entries = max_entries
        self.racy_ns = int(racy_s * 1e9)
        self._entries: dict[tuple[int, int], tuple[int, int, int, str]] = {}

    def get(self, st: os.stat_result) -> str | None:
        hit = self._entries.get((st.st_dev, st.st_ino))
        if hit is None or hit[:3] != (st.st_size, st.st_mtime_ns, st.st_ctime_ns):
            return None
        return hit[3]

    def put(self, st: os.stat_result, sha256: str, hashed_at_ns: int) -> None:
        if max(st.st_mtime_ns, st.st_ctime_ns) > hashed_at_ns - self.racy_ns:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[(st.st_dev, st.st_ino)] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                                 sha256)


HASHES = HashCache()


def _hash_at(dir_fd: int, name: str) -> str:
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(f"{name} is no longer a regular file")
    started_ns = time.time_ns()
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    HASHES.put(st, digest.hexdigest(), started_ns)
    return digest.hexdigest()


def open_regular(root: Path, rel: str) -> int:
    """A read-only fd on ``root/rel``, refusing a symlink at any component (untrusted tree)."""
    parts = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(leaf).st_mode):
        os.close(leaf)
        raise OSError(f"{rel} is no longer a regular file")
    return leaf


def read_verified(root: Path, entry: Entry) -> bytes:
    try:
        with os.fdopen(open_regular(root, entry.path), "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise changed(entry) from exc
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise changed(entry)
    return data


def stage_verified(root: Path, entry: Entry, staging: Path) -> None:
    """Copy a large file to a private staging file, checking its hash on the way."""
    digest = hashlib.sha256()
    try:
        with os.fdopen(open_regular(root, entry.path), "rb") as src, staging.open("wb") as dst:
            while chunk := src.read(CHUNK_BYTES):
                digest.update(chunk)
                dst.write(chunk)
    except OSError as exc:
        raise changed(entry) from exc
    if digest.hexdigest() != entry.sha256:
        raise changed(entry)


def changed(entry: Entry) -> StorageError:
    return StorageError(
        f"{entry.path} changed while the workspace was being snapshotted; "
        "snapshot a workspace only while no code runs in it"
    )
