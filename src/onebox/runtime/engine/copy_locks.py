"""Who uses a session's copy on this host: steps share it, a restore needs it alone.

Every worker process of a host uses the same copy of a run's workspace (one home, one
sandbox root). A step holds the copy *shared* from its snapshot before to its snapshot
after; replacing the copy (a restore, when a step needs what another host committed) holds
it *exclusively*, so it never pulls files from under a running step. Both are ``flock``
locks on files beside the workspace marks (out of the sandbox's reach), so they hold across
the processes of one host and die with a killed process.

A waiting exclusive holder first takes a turnstile that every new shared holder must pass
through, so a stream of starting steps cannot starve a restore. Waits poll (a non-blocking
``flock`` every 20 ms): a cancelled wait leaves no lock behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

POLL_S = 0.02


def _open(path: Path) -> int:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


async def _take(fd: int, mode: int) -> None:
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await asyncio.sleep(POLL_S)


class CopyLocks:
    """The shared/exclusive locks of the session copies under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _paths(self, session_id: str) -> tuple[Path, Path]:
        name = hashlib.sha256(session_id.encode()).hexdigest()[:32]
        return self.root / f"{name}.use", self.root / f"{name}.gate"

    @contextlib.asynccontextmanager
    async def shared(self, session_id: str) -> AsyncIterator[None]:
        use_path, gate_path = self._paths(session_id)
        gate, use = _open(gate_path), _open(use_path)
        try:
            await _take(gate, fcntl.LOCK_EX)  # pass the turnstile ...
            try:
                await _take(use, fcntl.LOCK_SH)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)  # ... and let the next one through
            yield
        finally:
            os.close(use)
            os.close(gate)

    @contextlib.asynccontextmanager
    async def exclusive(self, session_id: str) -> AsyncIterator[None]:
        use_path, gate_path = self._paths(session_id)
        gate, use = _open(gate_path), _open(use_path)
        try:
            await _take(gate, fcntl.LOCK_EX)  # new steps wait at the turnstile meanwhile
            await _take(use, fcntl.LOCK_EX)
            yield
        finally:
            os.close(use)
            os.close(gate)

    @contextlib.asynccontextmanager
    async def if_free(self, session_id: str) -> AsyncIterator[bool]:
        """The copy alone, if no step or restore of this host holds or waits for it now;
        never waits: yields False (holding nothing) when it is in use. For removing a
        released run's copy, which the next sweep retries."""
        use_path, gate_path = self._paths(session_id)
        gate, use = _open(gate_path), _open(use_path)
        try:
            try:
                fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free = True
            except BlockingIOError:
                free = False
            yield free
        finally:
            os.close(use)
            os.close(gate)

    def forget(self, session_id: str) -> None:
        """The copy is gone (its run was released): its lock files go too."""
        for path in self._paths(session_id):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
