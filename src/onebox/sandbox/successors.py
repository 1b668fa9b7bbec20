"""A warm sandbox for a session's *next* call: the steps of a run arrive one after another.

After a call in session S ends, one sandbox bound to S's workspace is spawned
and left blocked before its command (default limits, no network). If S's next
call comes within ``linger_s`` it starts in that sandbox and skips the setup;
otherwise the sandbox is discarded, so an idle session keeps no process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from onebox.sandbox import policy
from onebox.sandbox.base import ExecRequest, Limits
from onebox.sandbox.sessions import Session
from onebox.sandbox.spawner import Blocked

if TYPE_CHECKING:
    from onebox.sandbox.bwrap_host import BwrapHost

from onebox.errors import SandboxUnavailable

logger = logging.getLogger(__name__)
TAKE_WAIT_S = 2.0


class SessionSuccessors:
    """At most one pre-spawned sandbox per session, discarded after ``linger_s``."""

    def __init__(self, backend: BwrapHost, linger_s: float, enabled: bool) -> None:
        self.backend = backend
        self.linger_s = linger_s
        self.enabled = enabled
        self.limits = policy.resolve_limits(backend.cfg, Limits())
        self._pending: dict[str, asyncio.Task[Blocked | None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def ready(self) -> int:
        return sum(1 for t in self._pending.values() if t.done() and t.result() is not None)

    def prepare(self, session: Session) -> None:
        """Spawn the session's next sandbox in the background (if none is waiting)."""
        sid = session.session_id
        if not self.enabled or sid in self._pending:
            return
        loop = asyncio.get_running_loop()
        self._pending[sid] = loop.create_task(self._spawn(session))
        self._timers[sid] = loop.call_later(self.linger_s, self._expire, sid)

    async def _spawn(self, session: Session) -> Blocked | None:
        try:
            return await self.backend.spawn(session.path, self.limits, None)
        except (SandboxUnavailable, FileNotFoundError) as exc:
            # the workspace is being replaced (a step's view restored over it: gone, or its
            # root root's for a moment); the next call checks it again and spawns its own
            logger.info("no pre-spawned sandbox for %s: %s", session.session_id, exc)
            return None
        except Exception as exc:  # the next call spawns its own sandbox; say why this failed
            logger.warning("could not pre-spawn the next sandbox of %s: %s", session.session_id,
                           exc, exc_info=exc)
            return None

    async def take(
        self, session: Session, request: ExecRequest, limits: policy.ResolvedLimits
    ) -> Blocked | None:
        """The session's waiting sandbox, if it fits this request and the workspace is intact."""
        task = self._pending.get(session.session_id)
        if (task is None or request.network.enabled or request.environment is not None
                or request.host_python_packages or limits != self.limits):
            return None
        self._forget(session.session_id)
        try:
            blocked = await asyncio.wait_for(asyncio.shield(task), TAKE_WAIT_S)
        except TimeoutError:
            task.add_done_callback(self._discard_later)
            return None
        if blocked is None or blocked.proc.poll() is not None or not session.intact():
            if blocked is not None:
                await self._discard(blocked)
            return None
        return blocked

    def _forget(self, sid: str) -> asyncio.Task[Blocked | None] | None:
        timer = self._timers.pop(sid, None)
        if timer is not None:
            timer.cancel()
        return self._pending.pop(sid, None)

    def _expire(self, sid: str) -> None:
        task = self._forget(sid)
        if task is not None:
            task.add_done_callback(self._discard_later)

    def _discard_later(self, task: asyncio.Task[Blocked | None]) -> None:
        """Done-callback: kill a sandbox nobody is going to use; its run dir goes later."""
        if task.cancelled() or task.exception() is not None:
            return
        blocked = task.result()
        if blocked is not None:
            blocked.discard()
            self.backend.discard_later(blocked)

    async def _discard(self, blocked: Blocked) -> None:
        blocked.discard()
        await self.backend.discard(blocked)

    async def drop(self, sid: str) -> None:
        """Discard the session's waiting sandbox now (cleanup, reaping, close)."""
        task = self._forget(sid)
        if task is None:
            return
        with contextlib.suppress(asyncio.CancelledError):
            blocked = await task
            if blocked is not None:
                await self._discard(blocked)

    async def close(self) -> None:
        for sid in list(self._pending):
            await self.drop(sid)
