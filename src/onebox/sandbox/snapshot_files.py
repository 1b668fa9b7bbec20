"""Reading a workspace that untrusted code wrote: walk it, hash it, copy files out.

Every access goes through :mod:`onebox.sandbox.hostfs`: paths resolve beneath the
workspace root's fd with no symlink on any component, and only regular files are
opened. A scan is bounded (entries, depth, time, the bytes its blobs would hold, and
the files' apparent size); past a bound it raises StorageError naming the bound, which
fails that snapshot only. A sparse file is recorded with its data runs, so its holes
cost the store nothing and restore makes them holes again. Hashes of unchanged files are cached
(:class:`HashCache`), so a big workspace costs little to snapshot at every step.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from onebox.errors import StorageError
from onebox.objects.base import CHUNK_BYTES
from onebox.sandbox import hostfs
from onebox.sandbox.snapshot_manifest import MAX_EXTENTS, Entry, Manifest

log = logging.getLogger(__name__)

LOST_FOUND = "lost+found"
MAX_ENTRIES = 200_000
MAX_DEPTH = 256
SCAN_DEADLINE_S = 120.0
MAX_SNAPSHOT_BYTES = 1 << 30  # bytes a snapshot's blobs may hold (= the default disk_mb)
MAX_APPARENT_BYTES = 16 << 30  # apparent size of its files, holes included (hashing them costs)
SPARSE_MIN_BYTES = 1 << 20  # smaller files are stored dense, holes or not


def scan(workspace_dir: Path, *, max_entries: int = MAX_ENTRIES,
         max_bytes: int | None = None) -> Manifest:
    """Walk ``workspace_dir`` (never following symlinks) and hash every regular file.

    A workspace past a bound (``max_entries`` entries, ``MAX_DEPTH`` levels,
    ``SCAN_DEADLINE_S`` seconds, ``max_bytes`` of stored bytes, ``MAX_APPARENT_BYTES`` of
    apparent size) is refused with StorageError: sandboxed code must not make snapshots
    arbitrarily expensive. ``max_bytes`` defaults to the workspace's disk cap (the size
    of its own file system, when it is one), at most ``MAX_SNAPSHOT_BYTES``. A sparse
    file stores only its data runs, which count against ``max_bytes``; one with more
    than ``MAX_EXTENTS`` runs is stored dense and counts in full.
    """
    root = Path(workspace_dir)
    if not root.is_dir() or root.is_symlink():
        return Manifest(())
    mounted = os.path.ismount(root)
    if max_bytes is None:
        max_bytes = _disk_cap_bytes(root) if mounted else MAX_SNAPSHOT_BYTES
    skip = frozenset({LOST_FOUND}) if mounted else frozenset()
    bounds = hostfs.Bounds(max_entries, MAX_DEPTH, SCAN_DEADLINE_S)
    try:
        with hostfs.root(root) as root_fd:
            entries = _scan(root_fd, root, bounds, skip, max_bytes)
    except hostfs.BoundExceeded as exc:
        # Named by session, not host path: this message reaches API clients in events.
        limit = int(exc.limit) if float(exc.limit).is_integer() else exc.limit
        raise StorageError(
            f"the workspace of session {root.name} is too big to snapshot: {exc} (bound "
            f"{exc.bound} = {limit}); not snapshotting it. Fix: have the step clean up "
            "temporary files, or raise the bound.") from exc
    except OSError as exc:
        kind = WorkspaceChanged if exc.errno in (errno.EAGAIN, errno.ENOENT) else StorageError
        raise kind(f"cannot snapshot the workspace of session {root.name}: "
                   f"{exc.strerror or exc}") from exc
    return Manifest(tuple(sorted(entries, key=lambda e: e.path)))


def _disk_cap_bytes(root: Path) -> int:
    """The size of the workspace's own file system (its disk cap), at most the global bound."""
    st = os.statvfs(root)
    return min(MAX_SNAPSHOT_BYTES, st.f_blocks * st.f_frsize)


def _scan(root_fd: int, root: Path, bounds: hostfs.Bounds, skip: frozenset[str],
          max_bytes: int) -> list[Entry]:
    out: list[Entry] = []
    stored = apparent = 0
    for item in hostfs.walk(root_fd, bounds, skip_top=skip):
        mode = stat.S_IMODE(item.st.st_mode) & 0o777
        if item.kind == "dir":
            out.append(Entry(item.path, "dir", mode))
        elif item.kind == "symlink":
            out.append(Entry(item.path, "symlink", 0, target=item.target))
        elif item.kind == "file":
            apparent += item.st.st_size
            if apparent > MAX_APPARENT_BYTES:
                raise hostfs.BoundExceeded("max_apparent_bytes", MAX_APPARENT_BYTES, (
                    f"its files' apparent size, holes included, is over {MAX_APPARENT_BYTES}"))
            runs = _sparse_runs(root_fd, item)
            stored += item.st.st_size if runs is None else sum(n for _, n in runs)
            if stored > max_bytes:
                raise hostfs.BoundExceeded("max_bytes", max_bytes, (
                    f"its files hold more than {max_bytes} bytes of data"))
            out.append(_file_entry(root_fd, item, mode, runs))
        else:
            log.warning("snapshot skips %s/%s: not a file, directory or symlink", root, item.path)
    return out


def _sparse_runs(root_fd: int, item: hostfs.Item) -> tuple[tuple[int, int], ...] | None:
    """A large file's data runs when it has holes (fewer than MAX_EXTENTS runs), else None."""
    st = item.st
    if st.st_size < SPARSE_MIN_BYTES or st.st_blocks * 512 >= st.st_size:
        return None
    fd, st = hostfs.open_regular(root_fd, item.path)
    with hostfs.opened(fd):
        runs = hostfs.data_runs(fd, st.st_size, MAX_EXTENTS)
    if runs is None or sum(n for _, n in runs) >= st.st_size:
        return None
    return runs


def _file_entry(root_fd: int, item: hostfs.Item, mode: int,
                runs: tuple[tuple[int, int], ...] | None) -> Entry:
    if runs is None:
        sha256 = HASHES.get(item.st) or _hash_at(root_fd, item.path)
        return Entry(item.path, "file", mode, item.st.st_size, sha256)
    fd, st = hostfs.open_regular(root_fd, item.path)
    with hostfs.opened(fd):
        if st.st_size != item.st.st_size:
            raise OSError(errno.EAGAIN, f"{item.path} changed while it was being scanned")
        whole, data = hostfs.sparse_digests(fd, st.st_size, runs)
    return Entry(item.path, "file", mode, st.st_size, whole, extents=runs, data_sha256=data)


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


def _hash_at(root_fd: int, rel: str) -> str:
    fd, st = hostfs.open_regular(root_fd, rel)
    with hostfs.opened(fd):
        started_ns = time.time_ns()
        sha256 = hostfs.sha256_fd(fd, st.st_size)
    HASHES.put(st, sha256, started_ns)
    return sha256


def open_regular(root: Path, rel: str) -> int:
    """A read-only fd on ``root/rel``, refusing a symlink at any component (untrusted tree)
    and anything but a regular file (a FIFO or device is never blocked on)."""
    with hostfs.root(root) as root_fd:
        fd, _st = hostfs.open_regular(root_fd, rel)
    return fd


def read_verified(root: Path, entry: Entry) -> bytes:
    """The file's blob (a sparse file's data runs end to end), checked against its hash."""
    if entry.extents is not None:
        return b"".join(_runs_verified(root, entry))
    try:
        with hostfs.root(root) as root_fd:
            data = hostfs.read_bounded(root_fd, entry.path, entry.size)
    except OSError as exc:
        raise changed(entry) from exc
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise changed(entry)
    return data


def stage_verified(root: Path, entry: Entry, staging: Path) -> None:
    """Copy a large file's blob to a private staging file, checking its hash on the way."""
    if entry.extents is not None:
        with staging.open("wb") as dst:
            for chunk in _runs_verified(root, entry):
                dst.write(chunk)
        return
    digest = hashlib.sha256()
    try:
        with os.fdopen(open_regular(root, entry.path), "rb") as src, staging.open("wb") as dst:
            left = entry.size
            while left > 0 and (chunk := src.read(min(CHUNK_BYTES, left))):
                digest.update(chunk)
                dst.write(chunk)
                left -= len(chunk)
            if src.read(1):
                raise OSError(errno.EFBIG, "file grew while it was being copied")
    except OSError as exc:
        raise changed(entry) from exc
    if digest.hexdigest() != entry.sha256:
        raise changed(entry)


def _runs_verified(root: Path, entry: Entry) -> Iterator[bytes]:
    """A sparse file's data runs, read again and checked against ``data_sha256`` (the last
    chunk is given only once the whole blob matched)."""
    assert entry.extents is not None
    digest, held = hashlib.sha256(), b""
    try:
        with hostfs.opened(open_regular(root, entry.path)) as fd:
            if os.fstat(fd).st_size != entry.size:
                raise changed(entry)
            for start, length in entry.extents:
                for chunk in hostfs.read_run(fd, start, length):
                    digest.update(chunk)
                    if held:
                        yield held
                    held = chunk
    except OSError as exc:
        raise changed(entry) from exc
    if digest.hexdigest() != entry.data_sha256:
        raise changed(entry)
    yield held


class WorkspaceChanged(StorageError):
    """A file changed between the scan and the copy (a parallel step of the same session
    writing): the snapshot may be taken again."""


def changed(entry: Entry) -> StorageError:
    return WorkspaceChanged(
        f"{entry.path} changed while the workspace was being snapshotted; "
        "snapshot a workspace only while no code runs in it"
    )
