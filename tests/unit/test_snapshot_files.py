"""The hash cache behind snapshots of big workspaces: unchanged files are not re-read,
changed ones always are, even when size and mtime are put back."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from onebox.sandbox import snapshot_files
from onebox.sandbox.snapshot_files import HashCache, scan


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A fresh cache; counts the files actually read."""
    cache = HashCache(racy_s=0.0)
    monkeypatch.setattr(snapshot_files, "HASHES", cache)
    counted: list[int] = []
    real_put = cache.put

    def put(st: os.stat_result, sha256: str, hashed_at_ns: int) -> None:
        counted.append(st.st_ino)
        real_put(st, sha256, hashed_at_ns)

    monkeypatch.setattr(cache, "put", put)
    return counted


def test_unchanged_files_are_hashed_once(tmp_path: Path, reads: list[int]) -> None:
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(b"x" * 1000 + bytes([i]))
    time.sleep(0.01)
    first = scan(tmp_path)
    assert len(reads) == 5
    assert scan(tmp_path) == first and len(reads) == 5


def test_a_rewrite_with_same_size_and_mtime_is_hashed_again(
    tmp_path: Path, reads: list[int]
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"aaaa")
    before = scan(tmp_path)
    st = path.stat()
    time.sleep(0.01)
    path.write_bytes(b"bbbb")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # code can restore mtime, not ctime
    after = scan(tmp_path)
    assert len(reads) == 2 and after.sha256 != before.sha256


def test_files_changed_just_before_hashing_are_not_cached(tmp_path: Path) -> None:
    cache = HashCache(racy_s=60.0)
    (tmp_path / "f").write_bytes(b"new")
    st = (tmp_path / "f").stat()
    cache.put(st, "a" * 64, time.time_ns())
    assert cache.get(st) is None
    old = HashCache(racy_s=0.0)
    old.put(st, "a" * 64, time.time_ns())
    assert old.get(st) == "a" * 64
