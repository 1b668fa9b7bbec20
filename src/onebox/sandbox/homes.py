"""Sandbox dirs of onebox homes, and reclaiming those whose home is gone.

As root with a home other users cannot traverse (``/root/.onebox``), a home's sandbox state
and workspaces live in ``/var/lib/onebox/homes/<hash of home>`` (see
``Settings.sandbox_dir``). Each such dir records its home's path in a ``home`` file. When a
backend starts, sibling dirs whose recorded home no longer exists are removed with their
workspaces, and the session uids those workspaces held are freed (their processes killed
first). What a killed onebox left mounted below the dir (workspace images, its run dir, its
warm pool) is unmounted first: no live process holds the dir, so the mounts are leftovers,
and keeping them kept a tenant's files on disk for good. A dir is left alone while any
onebox process holds one of its owner locks, when its record is missing (an older onebox:
nothing says whose it is), does not match its name, or is younger than a minute. Hosts that share the
dir start together and may reclaim the same one: a dir another start removed first is
skipped, never a reason for this start to fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from onebox.sandbox.identity import SessionIdentities, end_processes_of
from onebox.sandbox.sweep import owner_dead

logger = logging.getLogger(__name__)

HOMES = Path("/var/lib/onebox/homes")
RECORD = "home"
RECORD_GRACE_S = 60.0
_OCTAL = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040
MAX_DIRS_PER_START = 256  # the sweep's bound: a start never walks more sibling dirs than this


def dir_name(home: Path) -> str:
    """The name of ``home``'s dir under /var/lib/onebox/homes (as config.py derives it)."""
    return hashlib.sha256(str(home).encode()).hexdigest()[:16]


def start(state_dir: Path, home: Path, identities: SessionIdentities, *,
          homes: Path = HOMES) -> list[Path]:
    """Record ``home`` in its state dir (when that is one of ``homes``) and reclaim the
    dirs of homes that are gone; returns the dirs removed."""
    if not identities.per_session or state_dir.parent != homes:
        return []
    record(state_dir, home)
    return reclaim(homes, identities)


def record(state_dir: Path, home: Path) -> None:
    """Write ``state_dir/home`` (root's, 0600) naming the home it belongs to."""
    path = state_dir / RECORD
    tmp = state_dir / f".{RECORD}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(str(home))
    os.replace(tmp, path)


def reclaim(homes: Path, identities: SessionIdentities) -> list[Path]:
    """Remove the dirs below ``homes`` whose recorded home is gone (bounded)."""
    removed: list[Path] = []
    try:
        names = sorted(os.listdir(homes))[:MAX_DIRS_PER_START]
    except OSError:
        return removed
    for name in names:
        state_dir = homes / name
        try:
            if _orphaned(state_dir) and _reclaim_one(state_dir, identities):
                removed.append(state_dir)
        except OSError as exc:  # another host's start reclaimed it first: never stop a start
            logger.warning("not reclaiming %s: %s", state_dir, exc)
    return removed


def _orphaned(state_dir: Path) -> bool:
    """True when ``state_dir`` records a home that is gone, and nothing of it is live."""
    path = state_dir / RECORD
    try:
        st = os.stat(path, follow_symlinks=False)
        home = path.read_text()
    except OSError:
        return False  # no record: whose it is cannot be told
    if st.st_mtime > time.time() - RECORD_GRACE_S or dir_name(Path(home)) != state_dir.name:
        return False
    if os.path.lexists(home):
        return False
    return not _live_owner(state_dir / "owners")


def _reclaim_one(state_dir: Path, identities: SessionIdentities) -> bool:
    held = identities.uids_below(state_dir)
    for uid in held:
        if not end_processes_of(uid):
            logger.warning("not reclaiming %s: processes of session uid %s outlive SIGKILL",
                           state_dir, uid)
            return False
    if not _unmount_below(state_dir):
        return False
    with contextlib.suppress(FileNotFoundError):  # gone meanwhile: another start took it
        logger.info("reclaiming %s: its home %s is gone", state_dir,
                    (state_dir / RECORD).read_text(errors="replace"))
    shutil.rmtree(state_dir, ignore_errors=True)
    for uid, workspace in held.items():
        identities.free(workspace, uid)
    return not os.path.lexists(state_dir)


def _live_owner(owners: Path) -> bool:
    """True while a onebox process holds an owner lock here (or is taking one)."""
    try:
        names = os.listdir(owners)
    except OSError:
        return False
    for name in names:
        token = name.lstrip(".").removesuffix(".new").removesuffix(".lock")
        with owner_dead(owners, token, "") as dead:
            if not dead:
                return True
    return False


def _mounts_below(path: Path) -> list[str]:
    """The mount points at or below ``path``, deepest first."""
    prefix = str(path) + "/"
    points = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == str(path) or point.startswith(prefix):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def _unmount_below(path: Path) -> bool:
    """Detach every mount at or below ``path`` (lazily: nothing of the dead owner may hold
    one busy); False, with a warning, when one stays."""
    for point in _mounts_below(path):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    left = _mounts_below(path)
    if left:
        logger.warning("not reclaiming %s: %s stays mounted below it (umount it)", path,
                       ", ".join(left[:3]))
    return not left
