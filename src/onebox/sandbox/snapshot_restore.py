"""Building a restored tree where no session can see it, then handing it over whole.

A restore target is a session's workspace, which sandboxed code may be changing
at the same time (a successor sandbox, a leftover process, a race with an API
call). So the tree is built in a private staging directory (0700, owned by us):
beside the workspace when the workspace is a plain directory, or at the root of
the workspace's own file system when it is a mount (a loop image), so the final
step is a ``renameat`` of each top-level entry. Every operation is relative to a
directory fd (:mod:`onebox.sandbox.hostfs`); nothing in the workspace is resolved by
name. Entries get the workspace root's owner (the session's identity) when we run
as root.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path

from onebox.errors import Conflict
from onebox.objects.base import ObjectStore, blob_key
from onebox.sandbox import hostfs
from onebox.sandbox.snapshot_manifest import Entry, Manifest, escapes

LOST_FOUND = "lost+found"
STAGING_PREFIX = ".onebox-restore-"
INLINE_MAX_BYTES = 16 << 20
TRANSFER_CONCURRENCY = 8
MAX_LINK_HOPS = 40

Owner = tuple[int, int]


class Staging:
    """A private directory next to (or inside, for a mount) the target, and the target's fd."""

    def __init__(self, into: Path) -> None:
        self.into = into
        self.name = f"{STAGING_PREFIX}{uuid.uuid4().hex[:16]}"
        self.root_fd = os.open(into, hostfs.DIR_FLAGS)
        inside = os.path.ismount(into)
        self.parent_fd = os.dup(self.root_fd) if inside else os.open(into.parent, hostfs.DIR_FLAGS)
        os.mkdir(self.name, 0o700, dir_fd=self.parent_fd)
        self.fd = os.open(self.name, hostfs.DIR_FLAGS, dir_fd=self.parent_fd)
        os.fchmod(self.fd, 0o700)
        self.skip = frozenset({LOST_FOUND, self.name} if inside else set())

    def target_owner(self) -> Owner | None:
        """The workspace root's owner is the session's identity (given only as root)."""
        st = os.fstat(self.root_fd)
        return (st.st_uid, st.st_gid) if os.geteuid() == 0 else None

    def check_empty(self) -> None:
        extra = [n for n in os.listdir(self.root_fd) if n not in self.skip]
        if extra:
            raise Conflict(f"cannot restore into {self.into}: the directory is not empty")

    def close(self) -> None:
        for fd in (self.fd, self.root_fd, self.parent_fd):
            os.close(fd)


async def build_and_hand_over(store: ObjectStore, manifest: Manifest, into: Path,
                              owner: Owner | None) -> tuple[str, ...]:
    """Restore ``manifest`` into the empty directory ``into``; return the skipped symlinks."""
    try:
        await asyncio.to_thread(into.mkdir, parents=True, exist_ok=True)
        staging = await asyncio.to_thread(Staging, into)
    except OSError as exc:
        raise Conflict(f"cannot restore into {into}: it is not a directory we can use "
                       f"({exc.strerror})") from exc
    moved: list[str] = []
    try:
        await asyncio.to_thread(staging.check_empty)
        await asyncio.to_thread(_make_dirs, staging.fd, manifest)
        await _write_files(store, manifest, staging.fd)
        skipped = await asyncio.to_thread(
            _finish_tree, staging.fd, manifest, owner or staging.target_owner())
        await asyncio.to_thread(_hand_over, staging, moved)
        return skipped
    except BaseException:
        await asyncio.to_thread(_discard, staging, moved)
        raise
    finally:
        staging.close()


def _make_dirs(fd: int, manifest: Manifest) -> None:
    for entry in manifest.dirs():
        parent, name = hostfs.split_parent(entry.path)
        with hostfs.opened(hostfs.open_dir(fd, parent)) as pfd:
            os.mkdir(name, 0o700, dir_fd=pfd)


async def _write_files(store: ObjectStore, manifest: Manifest, fd: int) -> None:
    """Fetch each distinct content once (hash-checked) and write it to every path holding it."""
    by_hash: dict[str, list[Entry]] = {}
    for entry in manifest.files():
        by_hash.setdefault(entry.blob_sha256 or "", []).append(entry)
    with tempfile.TemporaryDirectory(prefix="onebox-restore-") as tmp:
        await gather_limited([partial(_fetch_and_write, store, entries, fd, Path(tmp))
                              for entries in by_hash.values()])


async def _fetch_and_write(store: ObjectStore, entries: list[Entry], fd: int, tmp: Path) -> int:
    """Fetch one blob (hash-checked) and write every file holding it: a sparse file's
    data runs at their offsets, its holes left holes."""
    first = entries[0]
    digest = first.blob_sha256
    assert digest is not None
    key = blob_key(digest)
    if first.stored_size <= INLINE_MAX_BYTES and first.extents is None:
        data = await store.get_verified(key, digest)
        for entry in entries:
            await asyncio.to_thread(hostfs.write_file, fd, entry.path, data, mode=0o600,
                                    exclusive=True)
        return first.size
    blob = tmp / digest
    await store.get_file_verified(key, digest, blob)
    for entry in entries:
        await asyncio.to_thread(_copy_in, blob, fd, entry)
    await asyncio.to_thread(blob.unlink)
    return first.size


def _copy_in(blob: Path, fd: int, entry: Entry) -> None:
    parent, name = hostfs.split_parent(entry.path)
    with hostfs.opened(hostfs.open_dir(fd, parent)) as pfd:
        out = os.open(name, hostfs.WRITE_FLAGS | os.O_EXCL, 0o600, dir_fd=pfd)
    with hostfs.opened(out), blob.open("rb") as src:
        size = os.fstat(src.fileno()).st_size
        if entry.extents is None:
            _copy_range(src.fileno(), out, 0, 0, size, entry.path)
            return
        if size != entry.stored_size:
            _eof(entry.path)
        os.ftruncate(out, entry.size)
        offset = 0
        for start, length in entry.extents:
            _copy_range(src.fileno(), out, offset, start, length, entry.path)
            offset += length


def _copy_range(src: int, out: int, src_at: int, out_at: int, count: int, rel: str) -> None:
    sent = 0
    while sent < count:
        sent += os.copy_file_range(src, out, count - sent, src_at + sent, out_at + sent) \
            or _eof(rel)


def _eof(rel: str) -> int:
    raise OSError(f"blob for {rel} ended early")


def _finish_tree(fd: int, manifest: Manifest, owner: Owner | None) -> tuple[str, ...]:
    """Symlinks that stay inside, then owners, then modes (deepest directories last)."""
    created, skipped = inside_links(manifest)
    for entry in created:
        parent, name = hostfs.split_parent(entry.path)
        with hostfs.opened(hostfs.open_dir(fd, parent)) as pfd:
            os.symlink(entry.target or "", name, dir_fd=pfd)
    if owner is not None:
        for entry in manifest.entries:
            if entry.path not in skipped:
                hostfs.chown_at(fd, entry.path, owner)
    for entry in manifest.files():
        hostfs.chmod_at(fd, entry.path, entry.mode)
    for entry in sorted(manifest.dirs(), key=lambda e: e.path.count("/"), reverse=True):
        hostfs.chmod_at(fd, entry.path, entry.mode)
    return tuple(sorted(skipped))


def inside_links(manifest: Manifest) -> tuple[list[Entry], set[str]]:
    """The symlinks whose chain (through the other kept symlinks) stays in the tree."""
    skipped = {e.path for e in manifest.symlinks() if escapes(e)}
    kept = {e.path: e for e in manifest.symlinks() if e.path not in skipped}
    changed = True
    while changed:
        links = {path: e.target or "" for path, e in kept.items()}
        outside = [path for path in kept if not resolves_inside(links, path)]
        changed = bool(outside)
        for path in outside:
            skipped.add(kept.pop(path).path)
    return list(kept.values()), skipped


def resolves_inside(links: dict[str, str], path: str) -> bool:
    """Follow ``path`` lexically through ``links`` (path -> target); False if it leaves."""
    pending, hops = path.split("/"), 0
    resolved: list[str] = []
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if not resolved:
                return False
            resolved.pop()
            continue
        resolved.append(name)
        target = links.get("/".join(resolved))
        if target is not None:
            hops += 1
            if hops > MAX_LINK_HOPS or target.startswith("/"):
                return False
            resolved.pop()
            pending = target.split("/") + pending
    return True


def _hand_over(staging: Staging, moved: list[str]) -> None:
    """Move each top-level entry from staging into the workspace, then drop staging."""
    for name in sorted(os.listdir(staging.fd)):
        try:
            hostfs.rename_at(staging.fd, name, staging.root_fd, name)
        except OSError as exc:
            raise Conflict(f"cannot restore into {staging.into}: {name!r} appeared there "
                           f"during the restore ({exc.strerror})") from exc
        moved.append(name)
    os.rmdir(staging.name, dir_fd=staging.parent_fd)


def _discard(staging: Staging, moved: list[str]) -> None:
    for name in moved:
        hostfs.remove_tree(staging.root_fd, name)
    hostfs.remove_tree(staging.parent_fd, staging.name)


async def gather_limited(jobs: Sequence[Callable[[], Awaitable[int]]]) -> list[int]:
    """Run the jobs at most TRANSFER_CONCURRENCY at a time. After a failure no new job
    starts, and the running ones finish (file I/O runs in threads, which cannot be
    cancelled) before the first error is raised, so callers can clean up safely."""
    gate = asyncio.Semaphore(TRANSFER_CONCURRENCY)
    errors: list[BaseException] = []

    async def run(job: Callable[[], Awaitable[int]]) -> int:
        async with gate:
            if errors:
                return 0
            try:
                return await job()
            except BaseException as exc:  # swallow-ok: kept in errors, raised after the gather
                errors.append(exc)
                return 0

    results = await asyncio.gather(*(run(job) for job in jobs))
    if errors:
        raise errors[0]
    return list(results)
