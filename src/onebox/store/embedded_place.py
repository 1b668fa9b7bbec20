"""Where the embedded database's data dir really lives, so that starting it opens nothing.

As root, the embedded server runs as its own system user, and the launcher makes every
parent of the data dir readable and searchable by everyone (``g+rx,o+rx`` up to ``/``) so
that user can reach it. Under a private home (``/root/.onebox``, a 0700 home in a 0700
directory) that would open the home, and its parent, to every local user. So, as root,
when some parent of ``<home>/pg`` is not already open that way, the data dir lives in a
directory onebox owns, ``/var/lib/onebox/pg/<hash of the path>/data``, and ``<home>/pg`` is
a symlink to it: the launcher's widening then touches only onebox's own directories (and
the standard ``/var/lib``), never the home or a directory onebox did not create.

A data dir of an older onebox (a real directory at ``<home>/pg``) is moved there on the
next start, unless its server is running (then it stays, and a warning says to restart).
Each dir under ``/var/lib/onebox/pg`` records the path it serves in a ``for`` file; a start
removes sibling dirs whose path is gone and whose server is not running (at most
``MAX_RECLAIMED`` per start, each at least ``GRACE_S`` old).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
import time
from pathlib import Path

from onebox.processes import pid_alive

log = logging.getLogger(__name__)

PG_ROOT = Path("/var/lib/onebox/pg")
RECORD = "for"
GRACE_S = 60.0
MAX_RECLAIMED = 64
_OPEN = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH


def place(pgdata: Path, *, root: Path = PG_ROOT) -> Path:
    """The path to hand the launcher for ``pgdata``: itself when nothing would be widened
    (not root, parents already open, or a symlink someone made), else a symlink into
    ``root`` made (and an older data dir moved) here."""
    pgdata = pgdata.expanduser().absolute()
    if os.geteuid() != 0 or pgdata.is_symlink() and not _ours(pgdata, root) or \
            _already_open(pgdata.parent):
        return pgdata
    real = root / dir_name(pgdata) / "data"
    _make_root(real.parent, pgdata)
    reclaim(root)
    if pgdata.is_symlink():
        return pgdata
    if pgdata.is_dir():
        if _server_running(pgdata):
            log.warning("the embedded database in %s runs; it moves to %s at its next start "
                        "(its home's parents stay open to other users until then)", pgdata, real)
            return pgdata
        if real.exists():
            shutil.rmtree(real)  # a half-finished earlier move; the home's copy is whole
        log.warning("moving the embedded database from %s to %s, so that its home stays "
                    "private (the home keeps a symlink to it)", pgdata, real)
        shutil.move(str(pgdata), str(real))
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    real.mkdir(mode=0o700, exist_ok=True)
    os.symlink(real, pgdata)
    return pgdata


def dir_name(pgdata: Path) -> str:
    return hashlib.sha256(str(pgdata).encode()).hexdigest()[:16]


def _ours(pgdata: Path, root: Path) -> bool:
    return Path(os.readlink(pgdata)).is_relative_to(root)


def _already_open(path: Path) -> bool:
    """Whether every directory from ``path`` up to ``/`` is g+rx,o+rx already (the
    launcher's widening would change nothing)."""
    for part in (path, *path.parents):
        try:
            if os.stat(part).st_mode & _OPEN != _OPEN:
                return False
        except FileNotFoundError:
            continue  # made later by mkdir with the default mode: look at its parent
    return True


def _make_root(own: Path, pgdata: Path) -> None:
    """``root`` and ``root/<hash>`` (root's, 0711: searchable, not listable), and the record."""
    for directory in (own.parent, own):
        directory.mkdir(mode=0o711, parents=True, exist_ok=True)
    record = own / RECORD
    if not record.exists():
        tmp = own / f".{RECORD}.{os.getpid()}"
        tmp.write_text(str(pgdata))
        tmp.chmod(0o600)
        os.replace(tmp, record)


def _server_running(data: Path) -> bool:
    """Whether a postmaster named in ``data/postmaster.pid`` is alive."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return False
    return pid_alive(pid)


def reclaim(root: Path = PG_ROOT) -> list[Path]:
    """Remove the dirs below ``root`` whose recorded path is gone (no symlink points to
    them any more) and whose server does not run; returns those removed."""
    removed: list[Path] = []
    with contextlib.suppress(FileNotFoundError):
        for own in sorted(root.iterdir())[:MAX_RECLAIMED * 4]:
            if len(removed) >= MAX_RECLAIMED:
                break
            if _abandoned(own):
                shutil.rmtree(own, ignore_errors=True)
                removed.append(own)
    if removed:
        log.info("removed %d embedded database dir(s) of homes that are gone: %s",
                 len(removed), ", ".join(p.name for p in removed))
    return removed


def _abandoned(own: Path) -> bool:
    try:
        record = own / RECORD
        served = Path(record.read_text())
        if time.time() - record.stat().st_mtime < GRACE_S or own.name != dir_name(served):
            return False
    except (OSError, ValueError):
        return False  # no record: nothing says whose it is
    if served.is_symlink() and Path(os.readlink(served)) == own / "data":
        return False
    return not _server_running(own / "data")
