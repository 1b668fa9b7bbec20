"""Workspace snapshots: capture a directory into an object store, restore it elsewhere.

A snapshot is a *manifest* (sorted entries: path, type, permission bits, size,
sha256 of each file, target of each symlink; no mtimes, owners or inode numbers)
plus one content-addressed blob per distinct file content. The sha256 of the
manifest's canonical JSON is the snapshot's hash: identical workspaces give
identical hashes, and a blob already in the store is never uploaded twice, so
storage grows with the bytes that changed.

    info = await capture(store, workspace_dir)              # -> SnapshotInfo
    report = await restore(store, info.sha256, into_dir)    # verifies every hash

This module touches only the file system and the object store. Reading the
untrusted workspace safely is :mod:`onebox.sandbox.snapshot_files`; the database
side lives in :mod:`onebox.store.snapshots`; the two are tied together in
:mod:`onebox.snapshots.archive`.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from onebox.objects.base import ObjectStore, blob_key, manifest_key
from onebox.sandbox.snapshot_files import read_verified, scan, stage_verified
from onebox.sandbox.snapshot_manifest import Entry, Manifest
from onebox.sandbox.snapshot_restore import build_and_hand_over, gather_limited

__all__ = ["RestoreReport", "SnapshotInfo", "capture", "load_manifest", "restore", "scan"]

log = logging.getLogger(__name__)

INLINE_MAX_BYTES = 16 << 20  # files up to this size are uploaded from memory, hash-checked


@dataclass(frozen=True)
class SnapshotInfo:
    """What :func:`capture` stored. ``bytes`` is the workspace size, ``stored_bytes`` the new part."""

    sha256: str
    manifest_key: str
    object_keys: tuple[str, ...]
    file_count: int
    bytes: int
    stored_bytes: int
    duration_ms: float


@dataclass(frozen=True)
class RestoreReport:
    sha256: str
    into: Path
    file_count: int
    bytes: int
    skipped_symlinks: tuple[str, ...]
    duration_ms: float


async def capture(
    store: ObjectStore,
    workspace_dir: Path,
    *,
    manifest: Manifest | None = None,
    present: Collection[str] = (),
) -> SnapshotInfo:
    """Snapshot ``workspace_dir`` into ``store``: upload missing blobs, then the manifest.

    Pass the ``manifest`` from an earlier :func:`scan` to skip hashing again (the
    database layer scans first, records which objects the snapshot will reference
    so a concurrent garbage collection keeps them, then uploads). Keys in ``present``
    are known to be stored and are not checked again (saves a request each on S3).
    """
    started = time.perf_counter()
    if manifest is None:
        manifest = await asyncio.to_thread(scan, workspace_dir)
    known = set(present)
    absent = await store.missing(k for k in manifest.object_keys() if k not in known)
    files = {e.blob_sha256: e for e in manifest.files()
             if blob_key(e.blob_sha256 or "") in absent}
    root = Path(workspace_dir)
    stored = await gather_limited(
        [partial(_upload_blob, store, root, entry) for entry in files.values()]
    )
    mkey = manifest_key(manifest.sha256)
    if mkey in absent:
        data = manifest.to_bytes()
        await store.put(mkey, data)
        stored.append(len(data))
    return SnapshotInfo(
        sha256=manifest.sha256,
        manifest_key=mkey,
        object_keys=manifest.object_keys(),
        file_count=len(manifest.files()),
        bytes=manifest.total_bytes,
        stored_bytes=sum(stored),
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    )


async def _upload_blob(store: ObjectStore, root: Path, entry: Entry) -> int:
    """Upload one file's blob (a sparse file's data runs), checking it still has the hash
    it was scanned with."""
    assert entry.blob_sha256 is not None
    key = blob_key(entry.blob_sha256)
    if entry.stored_size <= INLINE_MAX_BYTES:
        data = await asyncio.to_thread(read_verified, root, entry)
        await store.put(key, data)
        return len(data)
    with tempfile.TemporaryDirectory(prefix="onebox-snap-") as tmp:
        staging = Path(tmp) / "blob"
        await asyncio.to_thread(stage_verified, root, entry, staging)
        await store.put_file(key, staging)
    return entry.stored_size


async def load_manifest(store: ObjectStore, sha256: str) -> Manifest:
    """The manifest stored under ``sha256``, verified (IntegrityError names a bad object)."""
    key = manifest_key(sha256)
    return Manifest.from_bytes(await store.get_verified(key, sha256), source=key)


async def restore(
    store: ObjectStore,
    snapshot: str | Manifest,
    into_dir: Path,
    *,
    owner: tuple[int, int] | None = None,
) -> RestoreReport:
    """Recreate a snapshot in ``into_dir`` (absent or empty), checking every object's hash.

    Symlinks whose target would resolve outside ``into_dir`` are not created; they
    are listed in ``skipped_symlinks``. ``owner`` (uid, gid) is given to every restored
    entry; by default, as root, the owner of ``into_dir`` (the session's identity).
    The tree is built in a private staging directory and moved in only when complete
    (:mod:`onebox.sandbox.snapshot_restore`); on any error nothing is left behind.
    """
    started = time.perf_counter()
    manifest = snapshot if isinstance(snapshot, Manifest) else await load_manifest(store, snapshot)
    into = Path(into_dir)
    skipped = await build_and_hand_over(store, manifest, into, owner)
    return RestoreReport(
        sha256=manifest.sha256,
        into=into,
        file_count=len(manifest.files()),
        bytes=manifest.total_bytes,
        skipped_symlinks=skipped,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    )
