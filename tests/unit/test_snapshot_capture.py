"""Capture and restore a workspace through the fs object store: determinism, dedup,
byte-for-byte restore with permissions and symlinks, corruption detection."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from onebox.errors import Conflict, IntegrityError, StorageError
from onebox.objects import FsObjectStore, blob_key, manifest_key
from onebox.sandbox import snapshots
from onebox.sandbox.snapshots import capture, load_manifest, restore, scan


def build_tree(root: Path) -> None:
    (root / "src/pkg").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "src/pkg/mod.py").write_text("print('hi')\n")
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho run\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "secret.txt").write_bytes(b"\x00\xffbinary")
    os.chmod(root / "secret.txt", 0o600)
    (root / "src/pkg/copy.py").write_text("print('hi')\n")  # same content as mod.py
    os.symlink("pkg/mod.py", root / "src/link.py")
    os.chmod(root / "empty", 0o750)


def tree_state(root: Path) -> dict[str, tuple[str, int, bytes | str | None]]:
    state: dict[str, tuple[str, int, bytes | str | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            if path.is_symlink():
                state[rel] = ("link", 0, os.readlink(path))
            elif path.is_dir():
                state[rel] = ("dir", st.st_mode & 0o7777, None)
            else:
                state[rel] = ("file", st.st_mode & 0o7777, path.read_bytes())
    return state


@pytest.fixture
def store(tmp_path: Path) -> FsObjectStore:
    return FsObjectStore(tmp_path / "objects", fsync=False)


def test_identical_trees_hash_identically_regardless_of_mtime(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    build_tree(a)
    time.sleep(0.01)
    build_tree(b)
    os.utime(b / "run.sh", (1, 1))
    assert scan(a).sha256 == scan(b).sha256
    assert scan(a).to_bytes() == scan(b).to_bytes()


def test_hash_changes_with_content_mode_and_symlink_target(tmp_path: Path) -> None:
    build_tree(tmp_path)
    base = scan(tmp_path).sha256
    os.chmod(tmp_path / "run.sh", 0o700)
    assert scan(tmp_path).sha256 != base
    os.chmod(tmp_path / "run.sh", 0o755)
    assert scan(tmp_path).sha256 == base
    (tmp_path / "src/link.py").unlink()
    os.symlink("pkg/copy.py", tmp_path / "src/link.py")
    assert scan(tmp_path).sha256 != base


async def test_restore_is_byte_for_byte_with_modes_and_symlinks(
    store: FsObjectStore, tmp_path: Path
) -> None:
    src = tmp_path / "ws"
    build_tree(src)
    info = await capture(store, src)
    assert info.file_count == 4 and info.bytes == sum(
        len(p.read_bytes()) for p in src.rglob("*") if p.is_file() and not p.is_symlink()
    )
    report = await restore(store, info.sha256, tmp_path / "out")
    assert tree_state(tmp_path / "out") == tree_state(src)
    assert report.skipped_symlinks == ()
    assert scan(tmp_path / "out").sha256 == info.sha256


async def test_unchanged_content_is_stored_once(store: FsObjectStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(20):
        (ws / f"f{i}.bin").write_bytes(os.urandom(10_000))
    first = await capture(store, ws)
    (ws / "f3.bin").write_bytes(os.urandom(10_000))
    second = await capture(store, ws)
    assert first.stored_bytes > 200_000
    assert 10_000 <= second.stored_bytes < 10_000 + 5_000  # one blob plus a small manifest
    assert len(await store.list("blobs/")) == 21
    again = await capture(store, ws)
    assert again.sha256 == second.sha256 and again.stored_bytes == 0


async def test_duplicate_files_share_one_blob(store: FsObjectStore, tmp_path: Path) -> None:
    build_tree(tmp_path / "ws")
    info = await capture(store, tmp_path / "ws")
    assert len(await store.list("blobs/")) == 3  # mod.py and copy.py are one blob
    assert len(info.object_keys) == 4


async def test_corrupted_blob_is_refused_naming_the_object(
    store: FsObjectStore, tmp_path: Path
) -> None:
    build_tree(tmp_path / "ws")
    info = await capture(store, tmp_path / "ws")
    entry = next(e for e in (await load_manifest(store, info.sha256)).files()
                 if e.path == "secret.txt")
    key = blob_key(entry.sha256 or "")
    (store.root / key).write_bytes(b"\x00\xffbinarX")
    with pytest.raises(IntegrityError, match=key):
        await restore(store, info.sha256, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []  # nothing half-restored is left


async def test_corrupted_manifest_is_refused(store: FsObjectStore, tmp_path: Path) -> None:
    build_tree(tmp_path / "ws")
    info = await capture(store, tmp_path / "ws")
    (store.root / manifest_key(info.sha256)).write_bytes(b'{"format":"onebox-snapshot/1"}')
    with pytest.raises(IntegrityError, match=manifest_key(info.sha256)):
        await restore(store, info.sha256, tmp_path / "out")


async def test_symlinks_pointing_outside_are_not_restored(
    store: FsObjectStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    (ws / "x/y").mkdir(parents=True)
    (ws / "inside.txt").write_text("ok")
    os.symlink("/etc/passwd", ws / "abs")
    os.symlink("../../outside", ws / "x/up")
    os.symlink("../..", ws / "x/y/top")              # resolves to the root: allowed
    os.symlink("x/y/top/..", ws / "chain")           # lexically inside, really outside
    os.symlink("../inside.txt", ws / "x/ok")
    info = await capture(store, ws)
    out = tmp_path / "out"
    report = await restore(store, info.sha256, out)
    assert report.skipped_symlinks == ("abs", "chain", "x/up")
    assert (out / "x/ok").read_text() == "ok"
    assert os.readlink(out / "x/y/top") == "../.."
    for dirpath, dirnames, filenames in os.walk(out):
        for name in dirnames + filenames:
            real = os.path.realpath(Path(dirpath) / name)
            assert real.startswith(str(out.resolve())), name


async def test_restore_refuses_a_non_empty_target(store: FsObjectStore, tmp_path: Path) -> None:
    build_tree(tmp_path / "ws")
    info = await capture(store, tmp_path / "ws")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy/keep.txt").write_text("mine")
    with pytest.raises(Conflict, match="not empty"):
        await restore(store, info.sha256, tmp_path / "busy")
    assert (tmp_path / "busy/keep.txt").read_text() == "mine"


async def test_empty_or_missing_workspace_is_a_valid_snapshot(
    store: FsObjectStore, tmp_path: Path
) -> None:
    info = await capture(store, tmp_path / "never-created")
    assert info.file_count == 0
    await restore(store, info.sha256, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("inline_max", [16 << 20, 10])  # from memory, and streamed from the file
async def test_a_file_changed_after_hashing_is_refused_not_stored_under_a_wrong_hash(
    store: FsObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline_max: int
) -> None:
    monkeypatch.setattr(snapshots, "INLINE_MAX_BYTES", inline_max)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(b"a" * 1000)
    stale = scan(ws)
    (ws / "big.bin").write_bytes(b"b" * 1000)
    with pytest.raises(StorageError, match="big.bin changed"):
        await capture(store, ws, manifest=stale)
    assert await store.list("blobs/") == []
    info = await capture(store, ws)
    await restore(store, info.sha256, tmp_path / "out")
    assert (tmp_path / "out/big.bin").read_bytes() == b"b" * 1000


async def test_odd_file_names_roundtrip(store: FsObjectStore, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in (b"line\nbreak", b"caf\xc3\xa9", b"not-utf8-\xff", b"back\\slash", b"-dash"):
        (ws / os.fsdecode(name)).write_bytes(name)
    info = await capture(store, ws)
    await restore(store, info.sha256, tmp_path / "out")
    assert tree_state(tmp_path / "out") == tree_state(ws)


def test_a_workspace_with_too_many_entries_is_refused(tmp_path: Path) -> None:
    for i in range(12):
        (tmp_path / f"f{i}").touch()
    assert len(scan(tmp_path, max_entries=12).entries) == 12
    with pytest.raises(StorageError, match="more than 11 entries"):
        scan(tmp_path, max_entries=11)


@pytest.mark.parametrize("inline_max", [16 << 20, 10])
@pytest.mark.parametrize("swap", ["leaf", "parent"])
async def test_files_swapped_for_symlinks_after_scanning_are_never_read_through(
    store: FsObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline_max: int,
    swap: str,
) -> None:
    monkeypatch.setattr(snapshots, "INLINE_MAX_BYTES", inline_max)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_bytes(b"host only")  # same bytes: only the path check can refuse
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d/f.txt").write_bytes(b"host only")
    stale = scan(ws)
    if swap == "leaf":
        (ws / "d/f.txt").unlink()
        os.symlink(outside / "f.txt", ws / "d/f.txt")
    else:
        os.rename(ws / "d", tmp_path / "moved")
        os.symlink(outside, ws / "d")
    with pytest.raises(StorageError, match="d/f.txt changed"):
        await capture(store, ws, manifest=stale)
    assert await store.list("blobs/") == []
