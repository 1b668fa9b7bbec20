"""Who owns what under a sandbox dir, and the sweep of what dead owners left behind.

Every backend instance (a worker, a server, a foreground ``onebox run``) takes an owner
token ``<pid>-<random>`` and holds an exclusive ``flock`` on ``owners/<token>.lock`` for
its whole life. Everything it creates that nobody else may use carries the token in its
name: its warm pool ``pool/<token>/`` (slot images ``images/<token>-<slot>.img``), its run
dirs ``run/<token>/`` (a tmpfs as root) and a template being formatted
``images/template-<mb>.<token>.tmp``. The kernel drops the lock when the process dies,
however it dies, so "the owner is dead" is provable: the lock can be taken. A token
without a lock file (an older onebox, or a half-finished sweep) is dead when its pid is.

What is swept, only for dead owners: pool slots (unmounted, image deleted, session uid
freed), run dirs (tmpfs unmounted, removed), orphan slot images and template temp files.
Session workspaces are never swept here: a workspace outlives its process on purpose (an
interrupted run resumes in it) and is released when its run finishes. A session a process
made only for itself (`onebox exec`'s own) names its owner in its database row
(:func:`claim_of`); :meth:`DeadOwnerSweeper.gone` says when that owner is dead, and
``runtime.engine.sessions.reclaim_abandoned`` ends the session. Sandboxes of a dead
owner need no sweep: bwrap runs under ``setpriv --pdeathsig KILL`` with
``--die-with-parent``, so they die with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from onebox.processes import pid_alive

logger = logging.getLogger(__name__)
SWEEP_EVERY_S = 15.0


class Identities(Protocol):
    def free(self, workspace: Path, uid: int | None) -> None: ...

    def uids_of(self, workspace: Path) -> list[int]: ...


class OwnerLock:
    """This process's token, held (flock) until :meth:`close`."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "owners"
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.token = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.claim = claim_of(state_dir, self.token)
        self.path = self.dir / f"{self.token}.lock"
        # Locked under a temporary name, then renamed: a sweeper never sees it unlocked.
        tmp = self.dir / f".{self.token}.new"
        self._fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.rename(tmp, self.path)

    def close(self) -> None:
        if self._fd >= 0:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = -1


def claim_of(state_dir: Path, token: str) -> str:
    """What names an owner outside the sandbox dir (a database row): ``host:dir:token``."""
    return f"{socket.gethostname()}:{state_dir}:{token}"


@contextlib.contextmanager
def owner_dead(owners: Path, token: str, own: str) -> Iterator[bool]:
    """Yields True (holding the dead owner's lock) when ``token``'s process is dead."""
    pid = token.split("-", 1)[0]
    if token == own or not pid.isdigit():
        yield False
        return
    try:
        fd = os.open(owners / f"{token}.lock", os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        yield not pid_alive(int(pid))
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
        (owners / f"{token}.lock").unlink(missing_ok=True)
    finally:
        os.close(fd)


class DeadOwnerSweeper:
    """Sweeps the leftovers of dead owners under ``state_dir``; at start and periodically."""

    def __init__(self, state_dir: Path, identities: Identities, lock: OwnerLock) -> None:
        self.state_dir, self.identities, self.lock = state_dir, identities, lock
        self._task: asyncio.Task[None] | None = None

    def tokens(self) -> set[str]:
        names: set[str] = set()
        for sub in ("pool", "run", "owners"):
            with contextlib.suppress(OSError):
                names.update(n.removesuffix(".lock") for n in os.listdir(self.state_dir / sub))
        with contextlib.suppress(OSError):
            for name in os.listdir(self.state_dir / "images"):
                if name.endswith((".img", ".tmp")) and not name.startswith("template-"):
                    names.add("-".join(name.split("-", 2)[:2]))
                elif name.endswith(".tmp"):
                    names.add(name.split(".")[1])
        return {n for n in names if not n.startswith(".") and n.split("-", 1)[0].isdigit()}

    def sweep(self) -> int:
        """Remove what dead owners left; returns how many owners were swept."""
        swept = 0
        for token in sorted(self.tokens()):
            with owner_dead(self.state_dir / "owners", token, self.lock.token) as dead:
                if dead:
                    self._sweep_owner(token)
                    swept += 1
        return swept

    def gone(self, claim: str) -> bool:
        """Whether the owner ``claim`` (:func:`claim_of`) is a process of this host and
        sandbox dir that has exited; another host's, another dir's or a live one: False."""
        host, _, rest = claim.partition(":")
        where, _, token = rest.rpartition(":")
        if host != socket.gethostname() or where != str(self.state_dir):
            return False
        with owner_dead(self.state_dir / "owners", token, self.lock.token) as dead:
            return dead

    def _sweep_owner(self, token: str) -> None:
        logger.info("sweeping what dead onebox process %s left under %s", token, self.state_dir)
        pool = self.state_dir / "pool" / token
        for slot in _listdir(pool):
            self._drop_slot(pool / slot, token)
        _remove_dir(pool)
        images = self.state_dir / "images"
        for name in _listdir(images):
            if name.startswith(f"{token}-") or name.endswith(f".{token}.tmp"):
                (images / name).unlink(missing_ok=True)
        run = self.state_dir / "run" / token
        _unmount(run)
        _remove_dir(run)

    def _drop_slot(self, slot: Path, token: str) -> None:
        # the slot's image may no longer be mounted here (its mount namespace died with its
        # owner): then the bare mount point is root's, and the marker names the uid
        uids = self.identities.uids_of(slot)
        _unmount(slot)
        (self.state_dir / "images" / f"{token}-{slot.name}.img").unlink(missing_ok=True)
        _remove_dir(slot)
        for uid in uids:
            self.identities.free(slot, uid)

    def start(self) -> None:
        """Sweep every ``SWEEP_EVERY_S`` in a thread while the event loop runs."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._forever())

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            try:
                await asyncio.to_thread(self.sweep)
            except OSError:
                logger.exception("sweeping dead onebox processes' leftovers failed; will retry")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _unmount(path: Path) -> None:
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _remove_dir(path: Path) -> None:
    if not os.path.ismount(path):
        shutil.rmtree(path, ignore_errors=True)
