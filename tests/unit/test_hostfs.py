"""hostfs: host access to an untrusted workspace, with openat2 and with the per-component
fallback (both are exercised: the fallback is what kernels before 5.6 get)."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from onebox.sandbox import hostfs


@pytest.fixture(params=["openat2", "per-component"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2":
        if not hostfs.has_openat2():
            pytest.skip("this kernel has no openat2")
    else:
        monkeypatch.setattr(hostfs, "_openat2_ok", False)
    return str(request.param)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    root = tmp_path / "ws"
    root.mkdir()
    with hostfs.root(root) as fd:
        yield root, fd


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    host.mkdir(mode=0o700)
    (host / "secret").write_bytes(b"host only")
    return host


def test_openat2_is_detected_once_on_this_kernel() -> None:
    assert hostfs.has_openat2() is hostfs.has_openat2()


@pytest.mark.parametrize("rel", ["/etc/passwd", "../x", "a/../../x", "a\x00b"])
def test_paths_leaving_the_root_are_refused(rel: str, resolver: str,
                                            ws: tuple[Path, int]) -> None:
    with pytest.raises(hostfs.Refused):
        hostfs.open_at(ws[1], rel, os.O_RDONLY)


def test_a_symlink_on_any_component_is_never_followed(
    resolver: str, ws: tuple[Path, int], secret: Path
) -> None:
    root, fd = ws
    (root / "d").symlink_to(secret)
    (root / "leaf").symlink_to(secret / "secret")
    (root / "real").mkdir()
    (root / "real" / "up").symlink_to("..")
    for rel in ("d/secret", "leaf", "real/up/leaf"):
        with pytest.raises(OSError) as caught:
            hostfs.read_bounded(fd, rel, 100)
        assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV, errno.EINVAL)


def test_fifos_are_refused_without_blocking(resolver: str, ws: tuple[Path, int]) -> None:
    root, fd = ws
    os.mkfifo(root / "pipe")
    with pytest.raises(hostfs.Refused, match="not a regular file"):
        hostfs.read_bounded(fd, "pipe", 100)  # a blocking open would hang here forever


def test_the_size_is_checked_before_reading(resolver: str, ws: tuple[Path, int]) -> None:
    root, fd = ws
    with open(root / "big", "wb") as f:
        f.truncate(1 << 40)  # 1 TiB apparent, nothing allocated
    with pytest.raises(hostfs.Refused) as caught:
        hostfs.read_bounded(fd, "big", 1 << 20)
    assert caught.value.errno == errno.EFBIG
    (root / "ok").write_bytes(b"12345")
    assert hostfs.read_bounded(fd, "ok", 5) == b"12345"


def test_write_file_creates_parents_and_refuses_links_in_the_way(
    resolver: str, ws: tuple[Path, int], secret: Path
) -> None:
    root, fd = ws
    hostfs.write_file(fd, "a/b/c.txt", b"ok")
    assert (root / "a/b/c.txt").read_bytes() == b"ok"
    (root / "x").symlink_to(secret)
    (root / "y").symlink_to(secret / "secret")
    for rel in ("x/new", "y"):
        with pytest.raises(OSError):
            hostfs.write_file(fd, rel, b"pwned")
    assert sorted(os.listdir(secret)) == ["secret"]
    assert (secret / "secret").read_bytes() == b"host only"


def test_walk_lists_links_as_links_and_stops_at_its_bounds(
    resolver: str, ws: tuple[Path, int], secret: Path
) -> None:
    root, fd = ws
    (root / "d/e").mkdir(parents=True)
    (root / "d/e/f").write_text("x")
    (root / "link").symlink_to(secret)
    items = {i.path: i for i in hostfs.walk(fd)}
    assert set(items) == {"d", "d/e", "d/e/f", "link"}
    assert items["link"].kind == "symlink" and items["link"].target == str(secret)
    with pytest.raises(hostfs.BoundExceeded) as deep:
        list(hostfs.walk(fd, hostfs.Bounds(max_depth=2)))
    assert deep.value.bound == "max_depth"
    with pytest.raises(hostfs.BoundExceeded) as many:
        list(hostfs.walk(fd, hostfs.Bounds(max_entries=3)))
    assert many.value.bound == "max_entries"


def test_walk_of_a_very_deep_tree_is_iterative_and_bounded(ws: tuple[Path, int]) -> None:
    root, fd = ws
    dfd = os.dup(fd)
    for _ in range(1500):  # deeper than Python's recursion limit and than PATH_MAX allows
        os.mkdir("d", dir_fd=dfd)
        inner = os.open("d", hostfs.DIR_FLAGS, dir_fd=dfd)
        os.close(dfd)
        dfd = inner
    os.close(dfd)
    fds_before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(hostfs.BoundExceeded, match="deeper than 256"):
        list(hostfs.walk(fd))
    assert len(os.listdir("/proc/self/fd")) == fds_before  # every level's fd was closed
    (root / "z.txt").write_text("after the deep tree")
    pruned: list[str] = []
    paths = [i.path for i in hostfs.walk(fd, hostfs.Bounds(max_depth=10), pruned=pruned)]
    assert len(paths) == 11 and paths[-1] == "z.txt"  # the walk went on past the deep tree
    assert pruned == ["/".join(["d"] * 10)]
    hostfs.remove_tree(fd, "d")
    assert os.listdir(root) == ["z.txt"]


def test_walk_never_enters_a_directory_swapped_for_a_symlink(
    ws: tuple[Path, int], secret: Path
) -> None:
    root, fd = ws
    stop = threading.Event()

    def attacker() -> None:
        while not stop.is_set():
            os.mkdir(root / "d")
            (root / "d" / "mine").write_text("x")
            os.rename(root / "d", root / "old")
            os.symlink(secret, root / "d")
            os.unlink(root / "d")
            (root / "old" / "mine").unlink()
            os.rmdir(root / "old")

    thread = threading.Thread(target=attacker)
    thread.start()
    try:
        for _ in range(300):
            paths = [i.path for i in hostfs.walk(fd)]
            assert not any(p.endswith("secret") for p in paths), paths
    finally:
        stop.set()
        thread.join()


def test_sparse_files_hash_like_their_bytes_and_report_allocation(ws: tuple[Path, int]) -> None:
    root, fd = ws
    with open(root / "sparse", "wb") as f:
        f.write(b"head")
        f.seek(5 << 20)
        f.write(b"tail")
    data = (root / "sparse").read_bytes()
    with hostfs.opened(os.open(root / "sparse", os.O_RDONLY)) as f_fd:
        size = os.fstat(f_fd).st_size
        assert hostfs.sha256_fd(f_fd, size) == hashlib.sha256(data).hexdigest()
        assert hostfs.allocated_bytes(f_fd, size) < size


def test_chmod_chown_and_rename_act_on_fds_not_on_link_targets(
    resolver: str, ws: tuple[Path, int], secret: Path
) -> None:
    root, fd = ws
    (root / "link").symlink_to(secret)
    with pytest.raises(OSError):
        hostfs.chmod_at(fd, "link", 0o777)
    hostfs.chown_at(fd, "link", (os.getuid(), os.getgid()))  # lchown: the link itself
    assert stat.S_IMODE(secret.stat().st_mode) == 0o700
    hostfs.write_file(fd, "f", b"1")
    hostfs.chmod_at(fd, "f", 0o600)
    assert stat.S_IMODE((root / "f").stat().st_mode) == 0o600
    hostfs.rename_at(fd, "f", fd, "g")
    with pytest.raises(hostfs.Refused):
        hostfs.rename_at(fd, "g", fd, "../escape")
    hostfs.unlink_at(fd, "g")
    assert sorted(os.listdir(root)) == ["link"]
