"""Session bookkeeping shared by the backends: workspaces, live count, idle reaper.

A session is a workspace directory plus the time it was last used. Same
session_id, same workspace. A session whose workspace vanished is recreated and
the next result says ``session_reset=True``. A background task reaps sessions
idle longer than ``idle_timeout_s`` without any request arriving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from onebox.sandbox.hostfs import file_identity as _identity
from onebox.sandbox.workspace import check_session_id

logger = logging.getLogger(__name__)

Hook = Callable[[Path], Awaitable[None]]
MAX_REMEMBERED = 10_000  # removed session ids kept (~2 MB): a call to one says session_reset


@dataclass
class Session:
    session_id: str
    path: Path
    last_used: float = field(default_factory=time.monotonic)
    active: int = 0
    identity: tuple[int, int] | None = None

    def intact(self) -> bool:
        """The workspace is still the directory (device, inode) this session created."""
        return _identity(self.path) == self.identity


class SessionTable:
    """Live sessions of one backend. ``create``/``destroy`` hooks do the backend's part.

    ``create`` must make the workspace usable whether or not its directory already
    exists (a workspace left by an earlier process is adopted as it is).
    """

    def __init__(self, root: Path, idle_timeout_s: float, create: Hook, destroy: Hook) -> None:
        self.root = root
        self.idle_timeout_s = idle_timeout_s
        self._create = create
        self._destroy = destroy
        self._sessions: dict[str, Session] = {}
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # lock, holders and waiters
        self._reaper: asyncio.Task[None] | None = None
        self._reaping: asyncio.Future[list[str]] | None = None
        self._gone: dict[str, None] = {}
        self._idle_events: dict[str, asyncio.Event] = {}

    def path(self, session_id: str) -> Path:
        return self.root / check_session_id(session_id)

    def live(self) -> int:
        return len(self._sessions)

    def ids(self) -> list[str]:
        return list(self._sessions)

    def has(self, session_id: str) -> bool:
        return session_id in self._sessions

    @contextlib.asynccontextmanager
    async def _lock(self, session_id: str) -> AsyncIterator[None]:
        """The session's own lock. It is dropped only when no one holds or waits for it: a
        caller waiting on a dropped lock would run beside one that took a new one (a remove
        beside a create leaves a workspace's uid marked after its files are gone)."""
        lock, users = self._locks.get(session_id) or (asyncio.Lock(), 0)
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users <= 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)

    @contextlib.asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """No execution starts in the session while held, and those running are waited for
        first (a snapshot restore changes the workspace under this)."""
        async with self._lock(check_session_id(session_id)):
            session = self._sessions.get(session_id)
            while session is not None and session.active > 0:
                await self._idle(session_id).wait()
            yield

    def _idle(self, session_id: str) -> asyncio.Event:
        event = self._idle_events.setdefault(session_id, asyncio.Event())
        event.clear()
        return event

    async def acquire(self, session_id: str) -> tuple[Session, bool]:
        """Mark the session busy, creating its workspace if needed; True when it was reset."""
        self._ensure_reaper()
        path = self.path(session_id)
        async with self._lock(session_id):
            session = self._sessions.get(session_id)
            reset = session_id in self._gone or (session is not None and not session.intact())
            if session is None or reset:
                await self._create(path)
                session = Session(session_id, path, identity=_identity(path))
                self._sessions[session_id] = session
                self._gone.pop(session_id, None)
            session.active += 1
            session.last_used = time.monotonic()
            return session, reset

    def adopt(self, session_id: str, path: Path) -> Session:
        """Register a workspace prepared elsewhere (the pool) as this session's."""
        session = Session(session_id, path, active=1, identity=_identity(path))
        self._sessions[session_id] = session
        self._gone.pop(session_id, None)
        self._ensure_reaper()
        return session

    def release(self, session: Session) -> None:
        session.active -= 1
        session.last_used = time.monotonic()
        if session.active <= 0 and session.session_id in self._idle_events:
            self._idle_events.pop(session.session_id).set()

    async def remove(self, session_id: str) -> None:
        path = self.path(session_id)
        async with self._lock(session_id):
            await self._destroy(path)
            if self._sessions.pop(session_id, None) is not None:
                self._remember_gone(session_id)

    def was_removed(self, session_id: str) -> bool:
        return session_id in self._gone

    def _remember_gone(self, session_id: str) -> None:
        """Removed sessions are remembered so a later call says session_reset=True."""
        self._gone[session_id] = None
        while len(self._gone) > MAX_REMEMBERED:
            self._gone.pop(next(iter(self._gone)))

    async def reap_idle(self) -> list[str]:
        now = time.monotonic()
        idle = [
            s.session_id
            for s in list(self._sessions.values())
            if s.active == 0 and now - s.last_used > self.idle_timeout_s
        ]
        reaped = []
        for session_id in idle:
            logger.info("reaping idle sandbox session %s", session_id)
            try:
                await self.remove(session_id)
            except Exception:  # one stuck workspace must not keep the others alive
                logger.exception("could not reap idle sandbox session %s; the next pass "
                                 "tries again", session_id)
                continue
            reaped.append(session_id)
        return reaped

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        interval = max(0.05, min(self.idle_timeout_s / 2, 30.0))
        while True:
            await asyncio.sleep(interval)
            self._reaping = asyncio.ensure_future(self.reap_idle())
            try:
                await asyncio.shield(self._reaping)
            except Exception:
                logger.exception("sandbox session reaper failed; will retry")

    async def close(self, destroy: bool = False) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        if self._reaping is not None:
            try:
                await self._reaping  # a reap in progress finishes (no half-removed workspace)
            except Exception:
                logger.exception("the sandbox session reap in progress at close failed")
        if destroy:
            for session_id in self.ids():
                await self.remove(session_id)


def serves(backend: object, session_id: str) -> bool:
    """Whether ``backend`` (its session table) serves the session now: its workspace was set
    up by this process. A backend without a table serves none."""
    table = getattr(backend, "sessions", None)
    return isinstance(table, SessionTable) and table.has(session_id)
