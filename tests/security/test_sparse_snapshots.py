"""Sparse files in snapshots: a workspace's holes cost the host's object store nothing, and
a restore gives the files back exactly (same size, same bytes, holes as holes).

The attack: code in a capped workspace writes files of gigabytes of apparent size holding a
few kilobytes, so each snapshot (before and after every step) would store gigabytes of
zeros on the host. Each probe checks it reached its target: the files are sparse in the
sandbox's own (loop-mounted, capped) file system, and their data is really there.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest
from sbx_helpers import sh

from onebox.errors import StorageError
from onebox.objects.fs import FsObjectStore
from onebox.sandbox import hostfs
from onebox.sandbox.linux import BwrapSandbox
from onebox.sandbox.snapshot_manifest import Manifest
from onebox.sandbox.snapshots import capture, restore, scan

FILES, APPARENT_MB = 4, 1000  # 4 GB apparent in a 1 GB-capped workspace
WRITE_SPARSE = f"""
import os
for i in range({FILES}):
    with open(f"big{{i}}.bin", "wb") as f:
        f.truncate({APPARENT_MB} << 20)
        for k, at in enumerate((0, 333 << 20, ({APPARENT_MB} << 20) - 4096)):
            f.seek(at)
            f.write(bytes([65 + i + k]) * 4096)  # three 4 KB islands of data
os.makedirs("sub", exist_ok=True)
open("sub/small.txt", "w").write("dense and small")
print("ok")
"""


def _stored_bytes(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


def _content_sha(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return hostfs.sha256_fd(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


async def test_gigabytes_of_holes_are_stored_as_kilobytes_and_restored_exactly(
    linux: BwrapSandbox, tmp_path: Path,
) -> None:
    session = "sparse-gb"
    result = await sh(linux, WRITE_SPARSE, session=session, disk_mb=1024, timeout_s=60)
    assert result.ok, result.stderr
    workspace = linux.workspace(session)
    assert os.path.ismount(workspace), "the probe needs the loop-mounted disk cap"
    big = sorted(workspace.glob("big*.bin"))
    assert len(big) == FILES and all(p.stat().st_size == APPARENT_MB << 20 for p in big)
    assert all(p.stat().st_blocks * 512 < 1 << 20 for p in big), "the files are sparse"

    store = FsObjectStore(tmp_path / "objects", fsync=False)
    manifest = await asyncio.to_thread(scan, workspace)
    info = await capture(store, workspace, manifest=manifest)
    assert info.bytes >= FILES * (APPARENT_MB << 20)  # the apparent size is what it reports
    assert info.stored_bytes < 1 << 20, info.stored_bytes
    assert _stored_bytes(tmp_path / "objects") < 2 << 20
    sparse = [e for e in manifest.files() if e.extents is not None]
    assert len(sparse) == FILES and all(e.stored_size >= 3 * 4096 for e in sparse)

    into = tmp_path / "restored"
    await restore(store, info.sha256, into)
    for original in big:
        copy = into / original.name
        assert copy.stat().st_size == original.stat().st_size
        assert copy.stat().st_blocks * 512 < 1 << 20, "holes came back as holes"
        assert _content_sha(copy) == _content_sha(original)
        with open(copy, "rb") as f:
            f.seek(333 << 20)
            assert f.read(4096)[:1] in {bytes([65 + i + 1]) for i in range(FILES)}
    assert (into / "sub" / "small.txt").read_text() == "dense and small"
    assert (await asyncio.to_thread(scan, into)).sha256 == manifest.sha256
    await linux.cleanup(session)


def test_a_sparse_entry_round_trips_through_the_manifest(tmp_path: Path) -> None:
    path = tmp_path / "s.bin"
    with open(path, "wb") as f:
        f.truncate(8 << 20)
        f.seek(5 << 20)
        f.write(b"x" * 10_000)
    manifest = scan(tmp_path)
    (entry,) = manifest.files()
    assert entry.extents is not None and entry.stored_size < 64 << 10
    assert entry.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    again = Manifest.from_bytes(manifest.to_bytes())
    assert again == manifest and again.sha256 == manifest.sha256


def test_data_not_holes_counts_against_the_bound(tmp_path: Path) -> None:
    with open(tmp_path / "sparse.bin", "wb") as f:
        f.truncate(64 << 20)  # 64 MB apparent, nothing allocated: stored as holes
    assert scan(tmp_path, max_bytes=32 << 20).files()[0].stored_size == 0
    (tmp_path / "dense.bin").write_bytes(os.urandom(33 << 20))
    with pytest.raises(StorageError, match="max_bytes"):
        scan(tmp_path, max_bytes=32 << 20)


def test_a_manifest_with_bad_extents_is_refused() -> None:
    from onebox.errors import IntegrityError

    good = hashlib.sha256(b"").hexdigest()
    for extents in ([[0, 10], [5, 10]], [[0, 0]], [[90, 20]], [[0, 1]] * 5000):
        doc = ('{"format":"onebox-snapshot/1","entries":[{"path":"f","type":"file","mode":420,'
               f'"size":100,"sha256":"{good}","extents":{extents},"data_sha256":"{good}"}}]}}')
        with pytest.raises(IntegrityError):
            Manifest.from_bytes(doc.replace("'", '"').encode())


async def test_a_sparse_file_downloads_whole_in_the_snapshot_tar(tmp_path: Path) -> None:
    import gzip
    import io
    import tarfile

    from onebox.sandbox.snapshot_tar import snapshot_tar_gz

    ws = tmp_path / "ws"
    ws.mkdir()
    with open(ws / "s.bin", "wb") as f:
        f.truncate(6 << 20)
        f.seek(1 << 20)
        f.write(b"island" * 1000)
    store = FsObjectStore(tmp_path / "objects", fsync=False)
    manifest = await asyncio.to_thread(scan, ws)
    assert manifest.files()[0].extents is not None
    await capture(store, ws, manifest=manifest)
    data = b"".join([chunk async for chunk in snapshot_tar_gz(store, manifest)])
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        member = tar.extractfile("s.bin")
        assert member is not None
        assert hashlib.sha256(member.read()).hexdigest() == manifest.files()[0].sha256
