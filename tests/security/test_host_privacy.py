"""What onebox stores on the host is private to onebox: an escaped session uid or another
local user reads none of it, even under a home other users can traverse."""

from __future__ import annotations

import os
import pwd
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from onebox.objects.fs import FsObjectStore

SESSION_UID = 265_000  # in the default session range: what a namespace escape would be


def _readable_as(uid: int, paths: list[Path]) -> list[str]:
    """The paths a process running as ``uid`` (no groups) could open, plus a control read of a
    world-readable file that must succeed (so the probe really ran as that uid)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to uid and try
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            opened = ["control"] if os.access("/etc/hostname", os.R_OK) and \
                Path("/etc/hostname").read_bytes() is not None else []
            for path in paths:
                try:
                    with open(path, "rb") as fh:
                        fh.read(1)
                    opened.append(str(path))
                except OSError:
                    pass
            os.write(write, "\n".join(opened).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    return out.splitlines()


@pytest.fixture
def open_home() -> Iterator[Path]:
    """A home under a parent every user can traverse (the case where modes matter)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to probe as other uids")
    home = Path(tempfile.mkdtemp(prefix="onebox-open-home-", dir="/tmp"))
    home.chmod(0o755)
    yield home
    import shutil

    shutil.rmtree(home, ignore_errors=True)


async def test_stored_objects_are_unreadable_to_session_uids_and_other_users(
        open_home: Path) -> None:
    store = FsObjectStore(open_home / "objects")
    await store.put("blobs/ab/abcdef", b"alice's upload")
    await store.put("files/run-1/report.csv", b"secret,figures\n")
    stored = [p for p in (open_home / "objects").rglob("*") if p.is_file()]
    assert len(stored) == 2
    for path in [open_home / "objects", *(open_home / "objects").rglob("*")]:
        assert path.stat().st_mode & 0o077 == 0, f"{path} is open to others"
    nobody = pwd.getpwnam("nobody").pw_uid
    for uid in (SESSION_UID, nobody):
        seen = _readable_as(uid, stored)
        assert seen == ["control"], f"uid {uid} read {seen[1:]} (or the probe did not run)"


async def test_an_object_root_left_open_by_an_older_onebox_is_narrowed(open_home: Path) -> None:
    root = open_home / "objects"
    (root / "blobs" / "00").mkdir(parents=True)
    root.chmod(0o755)
    old = root / "blobs" / "00" / "old"
    old.write_bytes(b"written world-readable before")
    old.chmod(0o644)
    await FsObjectStore(root).put("blobs/01/new", b"new")
    assert root.stat().st_mode & 0o777 == 0o700
    assert _readable_as(SESSION_UID, [old]) == ["control"]


def test_doctor_reports_a_home_other_users_can_enter(open_home: Path) -> None:
    from onebox.config import load_settings
    from onebox.runtime.services.doctor import check_home

    home = open_home / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    opened = check_home(load_settings(home=home))
    home.chmod(0o700)
    private = check_home(load_settings(home=home))
    open_home.chmod(0o777)  # a parent anyone may write: the home could be swapped
    swappable = check_home(load_settings(home=home))
    open_home.chmod(0o755)
    assert not opened.ok and "755" in opened.detail and f"chmod 700 {home}" in (opened.fix or "")
    assert private.ok, private.detail
    assert not swappable.ok and "writable by others" in swappable.detail


@pytest.fixture
def private_parent() -> Iterator[Path]:
    """A 0700 directory (as /root is) holding a 0700 home: the case the launcher opened."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the embedded server switches to its own user only as root")
    parent = Path(tempfile.mkdtemp(prefix="onebox-private-", dir="/tmp"))
    parent.chmod(0o700)
    (parent / "home").mkdir(mode=0o700)
    yield parent
    import shutil

    from onebox.store import embedded_place

    real = embedded_place.PG_ROOT / embedded_place.dir_name(parent / "home" / "pg")
    shutil.rmtree(parent, ignore_errors=True)
    shutil.rmtree(real, ignore_errors=True)


def _modes(*paths: Path) -> list[str]:
    return [oct(p.stat().st_mode & 0o777) for p in paths]


def _files_below(path: Path) -> list[Path]:
    return [Path(d) / f for d, _, files in os.walk(path) for f in files]


def test_starting_the_embedded_database_opens_no_directory_of_a_private_home(
    private_parent: Path,
) -> None:
    import psycopg

    from onebox.store.embedded import start_embedded, stop_embedded

    home = private_parent / "home"
    server, uri = start_embedded(home / "pg")
    try:
        with psycopg.connect(uri) as conn:
            conn.execute("CREATE TABLE kept (v text)")
            conn.execute("INSERT INTO kept VALUES ('secret row')")
        assert _modes(private_parent, home) == ["0o700", "0o700"]
        data = (home / "pg").resolve()
        files = _files_below(data)
        assert len(files) > 100 and any(f.name == "PG_VERSION" for f in files)
        for uid in (SESSION_UID, pwd.getpwnam("nobody").pw_uid):
            assert _readable_as(uid, files) == ["control"]
    finally:
        stop_embedded(home / "pg")
    assert _modes(private_parent, home) == ["0o700", "0o700"]


def test_a_data_dir_an_older_onebox_kept_in_the_home_moves_out_with_its_data(
    private_parent: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psycopg

    from onebox.store import embedded
    from onebox.store.embedded import start_embedded, stop_embedded

    home = private_parent / "home"
    with monkeypatch.context() as old:
        old.setattr(embedded, "place", lambda pgdata: pgdata)  # as before: in the home
        _, uri = start_embedded(home / "pg")
        with psycopg.connect(uri) as conn:
            conn.execute("CREATE TABLE kept (v text)")
            conn.execute("INSERT INTO kept VALUES ('from before')")
        stop_embedded(home / "pg")
    assert (home / "pg").is_dir() and not (home / "pg").is_symlink()
    assert _modes(private_parent)[0] != "0o700", "the probe reproduces the old widening"
    private_parent.chmod(0o700)
    home.chmod(0o700)
    _, uri = start_embedded(home / "pg")
    try:
        assert (home / "pg").is_symlink()
        with psycopg.connect(uri) as conn:
            assert conn.execute("SELECT v FROM kept").fetchone() == ("from before",)
        assert _modes(private_parent, home) == ["0o700", "0o700"]
    finally:
        stop_embedded(home / "pg")
