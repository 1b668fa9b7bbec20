"""A few pre-created sandboxes, so the first call of a new session skips the setup cost.

Each warm entry is a workspace (with its disk image mounted, when disk caps are
on) and a bubblewrap sandbox already spawned on it, with the default limits,
no network, confined to its cgroup and blocked before its command. A request
for a *new* session with default limits and no network takes one: the
workspace is moved to the session's path on the host (a rename, or MS_MOVE for
a mounted image; the sandbox keeps its own view of the same directory), the
command is written, and the sandbox is released. The pool refills behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from onebox.sandbox import policy
from onebox.sandbox.base import ExecRequest, Limits
from onebox.sandbox.disk import LoopDiskQuota
from onebox.sandbox.sessions import Session
from onebox.sandbox.spawner import Blocked, wait_until_set_up

if TYPE_CHECKING:
    from onebox.sandbox.bwrap_host import BwrapHost

logger = logging.getLogger(__name__)
MS_MOVE = 8192


@dataclass
class WarmEntry:
    slot: Path
    blocked: Blocked


def _move_mount(src: Path, dst: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(str(src).encode(), str(dst).encode(), None, MS_MOVE, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"MS_MOVE {src} -> {dst}: {os.strerror(err)}")


class WarmPool:
    """Keeps ``size`` blocked sandboxes with default limits ready for new sessions."""

    def __init__(self, backend: BwrapHost, size: int) -> None:
        self.backend = backend
        self.size = size
        self.root = backend.state_dir / "pool"
        # Named for the backend's owner token: what a dead process left is swept (sweep.py).
        self.dir = self.root / backend.owner_lock.token
        self.limits = policy.resolve_limits(backend.cfg, Limits())
        self._entries: list[WarmEntry] = []
        self._filler: asyncio.Task[None] | None = None
        self._closed = False
        self._broken = False

    def ready(self) -> int:
        return len(self._entries)

    def start(self) -> None:
        self.backend.sweeper.start()
        idle = self._filler is None or self._filler.done()
        if self.size > 0 and not self._closed and not self._broken and idle:
            self._filler = asyncio.get_running_loop().create_task(self._fill())

    async def wait_ready(self, timeout_s: float = 30.0) -> int:
        """Fill the pool and wait for it (used at start-up and by the benchmark)."""
        self.start()
        if self._filler is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._filler), timeout_s)
        return self.ready()

    async def _fill(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o711)
        while not self._closed and len(self._entries) < self.size:
            try:
                self._entries.append(await self._make_entry())
            except Exception:
                logger.exception("could not pre-create a sandbox; the pool is disabled")
                self._broken = True
                return

    async def _make_entry(self) -> WarmEntry:
        slot = self.dir / uuid.uuid4().hex[:16]
        try:
            await self.backend.make_workspace(slot)
            blocked = await self.backend.spawn(slot, self.limits, None)
            try:
                await wait_until_set_up(blocked)
            except BaseException:
                blocked.discard()
                await self.backend.discard(blocked)
                raise
        except BaseException:
            await self.backend.drop_workspace(slot)
            raise
        return WarmEntry(slot, blocked)

    def _eligible(self, request: ExecRequest, limits: policy.ResolvedLimits) -> bool:
        if (request.network.enabled or request.environment is not None
                or request.host_python_packages or limits != self.limits or not self._entries):
            return False
        sessions = self.backend.sessions
        if request.session_id in sessions.ids() or sessions.was_removed(request.session_id):
            return False
        return not sessions.path(request.session_id).exists()

    async def take(
        self, request: ExecRequest, limits: policy.ResolvedLimits
    ) -> tuple[Blocked, Session, bool] | None:
        """A warm sandbox now owning the new session's workspace, or None.

        Refilling is left to :meth:`start` after the call, so that spawning the next
        sandbox does not compete for the CPU with the call it was taken for.
        """
        if self._filler is None:
            self.start()
        if not self._eligible(request, limits):
            return None
        entry = self._entries.pop(0)
        if entry.blocked.proc.poll() is not None:
            entry.blocked.discard()
            await self.backend.discard(entry.blocked)
            await self.backend.drop_workspace(entry.slot)
            return None
        target = self.backend.sessions.path(request.session_id)
        try:
            self._install(entry.slot, target, self.backend.disk)
        except OSError:
            logger.exception("could not hand a warm sandbox over; the pool is disabled")
            self._broken = True
            entry.blocked.discard()
            await self.backend.discard(entry.blocked)
            await self.backend.drop_workspace(entry.slot)
            return None
        self.backend.identities.moved(target)
        session = self.backend.sessions.adopt(request.session_id, target)
        return entry.blocked, session, False

    @staticmethod
    def _install(slot: Path, target: Path, disk: LoopDiskQuota) -> None:
        if os.path.ismount(slot):
            os.rename(disk.image_of(slot), disk.image_of(target))
            target.mkdir(mode=0o755)
            try:
                _move_mount(slot, target)
            except OSError:
                target.rmdir()
                raise
            slot.rmdir()
        else:
            os.rename(slot, target)

    async def close(self) -> None:
        self._closed = True
        if self._filler is not None:
            # Let the entry being built finish (then it is discarded below); cancelling
            # bwrap mid-setup can orphan it.
            try:
                await self._filler
            except Exception:
                logger.exception("the sandbox pool's filler failed while closing")
        for entry in self._entries:
            entry.blocked.discard()
            await self.backend.discard(entry.blocked)
            await self.backend.drop_workspace(entry.slot)
        self._entries.clear()
        if self.dir.is_dir():
            for leftover in list(self.dir.iterdir()):
                await self.backend.drop_workspace(leftover)
            shutil.rmtree(self.dir, ignore_errors=True)
