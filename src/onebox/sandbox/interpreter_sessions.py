"""The linux backend's interpreters, one per session: start on first use, serialize calls,
restart when a call's policy differs or the last one died, and say so in the result.

A call holds its session busy (``SessionTable.acquire``) while it runs, so a snapshot
restore (``hold``) waits for it and the idle reaper never takes a session mid-call; when
the reaper or ``cleanup`` removes the session, its interpreter is killed with it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from onebox.sandbox import policy
from onebox.sandbox.base import CellError, CellRequest, CellResult, FileChange
from onebox.sandbox.interpreter import CellRun, SandboxInterpreter, settings_key
from onebox.sandbox.workspace import changes_since, state

if TYPE_CHECKING:
    from onebox.sandbox.bwrap_host import BwrapHost
    from onebox.sandbox.sessions import Session

MAX_REMEMBERED = 10_000  # sessions whose lost interpreter the next call reports


class SessionInterpreters:
    def __init__(self, backend: BwrapHost) -> None:
        self.backend = backend
        self._live: dict[str, SandboxInterpreter] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._lost: dict[str, str] = {}  # session -> why its interpreter is gone, in words

    def running(self, session_id: str) -> bool:
        interp = self._live.get(session_id)
        return interp is not None and interp.cell is not None

    async def run_cell(self, request: CellRequest) -> CellResult:
        limits = policy.resolve_limits(self.backend.cfg, request.limits)
        lock = self._locks.setdefault(request.session_id, asyncio.Lock())
        async with lock:
            session, reset = await self.backend.sessions.acquire(request.session_id)
            try:
                return await self._run(request, limits, session, reset)
            finally:
                self.backend.sessions.release(session)

    async def _run(self, request: CellRequest, limits: policy.ResolvedLimits,
                   session: Session, reset: bool) -> CellResult:
        restarted = await self._restart_reason(request, limits, session, reset)
        interp = self._live.get(request.session_id)
        if interp is None:
            interp = await SandboxInterpreter.start(self.backend, request, limits, session)
            self._live[request.session_id] = interp
        before = await state(session.path)
        interp.reset_peak()
        egress = interp.blocked.egress
        seen = len(egress.attempts()) if egress is not None else 0
        started = time.monotonic()
        cell = await interp.run(request, limits)
        duration_ms = round((time.monotonic() - started) * 1000, 3)
        blocked = egress.attempts()[seen:] if egress is not None else ()
        memory_peak_mb = interp.memory_peak_mb()
        if cell.lost is not None:
            await self.stop(request.session_id, cell.lost,
                            f"the previous interpreter was killed: {interp.kill_reason}")
        changes = await changes_since(session.path, before)
        lost = cell.lost or restarted
        return replace(_result(cell, lost, duration_ms, memory_peak_mb, changes.files),
                       blocked_network=blocked)

    async def _restart_reason(self, request: CellRequest, limits: policy.ResolvedLimits,
                              session: Session, reset: bool) -> str | None:
        """Why this call starts a fresh interpreter where there was state, or None."""
        why = self._lost.pop(request.session_id, None)
        interp = self._live.get(request.session_id)
        if interp is not None:
            change = _mismatch(interp, settings_key(request, limits), session, reset)
            if change is not None:
                await self.stop(request.session_id, change)
                self._lost.pop(request.session_id, None)
                why = f"the running interpreter was stopped: {change}"
        if why is None:
            return None
        return f"a fresh interpreter was started: {why}; variables and imports from " \
            "earlier calls are gone"

    def interrupt(self, session_id: str) -> int:
        """Kill the session's interpreter now; 1 if it was running a call."""
        interp = self._live.get(session_id)
        if interp is None:
            return 0
        busy = interp.cell is not None
        interp.kill("the session was interrupted")
        if not busy:
            self._forget(session_id, "the previous interpreter was killed: the session was "
                         "interrupted")
        return int(busy)

    async def stop(self, session_id: str, reason: str, note: str | None = None) -> None:
        """Kill the session's interpreter; ``note`` (default: from ``reason``) is what the
        next call's result says about the state that was lost."""
        interp = self._live.pop(session_id, None)
        if interp is None:
            return
        await interp.stop(reason)
        self._remember(session_id, note or f"the previous interpreter was stopped: {reason}")

    def lost_elsewhere(self, session_id: str, why: str) -> None:
        """The state was held by an interpreter outside this process (its server died):
        the next call says so, unless one runs here already (it is the state now)."""
        if session_id not in self._live:
            self._remember(session_id, why)

    def _remember(self, session_id: str, note: str) -> None:
        self._lost[session_id] = note
        while len(self._lost) > MAX_REMEMBERED:
            self._lost.pop(next(iter(self._lost)))

    def _forget(self, session_id: str, reason: str) -> None:
        interp = self._live.pop(session_id, None)
        if interp is not None:
            self._remember(session_id, reason)
            task = asyncio.get_running_loop().create_task(interp.stop(reason))
            self.backend._cleanups.add(task)
            task.add_done_callback(self.backend._cleanups.discard)

    async def session_gone(self, session_id: str, reason: str) -> None:
        """The session was removed (deleted or reaped): its interpreter goes with it."""
        await self.stop(session_id, reason)
        lock = self._locks.get(session_id)
        if lock is not None and not lock.locked():
            del self._locks[session_id]

    async def close(self) -> None:
        for session_id in list(self._live):
            await self.stop(session_id, "onebox shut the sandbox backend down")

    def pid_of(self, session_id: str) -> int | None:
        """The host pid of the interpreter sandbox's init (tests and diagnostics)."""
        interp = self._live.get(session_id)
        return None if interp is None else interp.blocked.child_pid


def _mismatch(interp: SandboxInterpreter, key: dict[str, object], session: Session,
              reset: bool) -> str | None:
    if reset or interp.identity != session.identity:
        return "the session's workspace was reset"
    if interp.kill_reason is not None or interp.blocked.proc.poll() is not None:
        return f"it had died ({interp.kill_reason or 'it exited'})"
    for name, value in key.items():
        if interp.key.get(name) != value:
            return f"this call's {name} differs from the running interpreter's"
    return None


def _result(cell: CellRun, lost: str | None, duration_ms: float,
            memory_peak_mb: float | None, files: tuple[FileChange, ...]) -> CellResult:
    return CellResult(
        stdout=cell.stdout.text(), stderr=cell.stderr.text(), results=tuple(cell.results),
        error=cell.error or _killed(cell), execution_count=cell.count, duration_ms=duration_ms,
        timed_out=cell.timed_out, state_lost=lost is not None, restart_reason=lost,
        memory_peak_mb=memory_peak_mb, files_written=files,
        truncated=cell.stdout.truncated or cell.stderr.truncated)


def _killed(cell: CellRun) -> CellError | None:
    """A call during which the interpreter died did not succeed: say why as its error."""
    return None if cell.lost is None else CellError("InterpreterKilled", cell.lost, "")
