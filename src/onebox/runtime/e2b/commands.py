"""E2B's ``commands.run`` over a session: one bash execution in the session's sandbox.

Each command gets a pid (a number of this table, not a host pid), streams its stdout and
stderr as it prints (the backend's ``on_output``), and ends with its exit code. A command
whose caller went away keeps running until it ends (E2B's ``background=True``); ``kill``
cancels its execution, which kills the sandboxed processes it started.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from onebox.runtime.services import tenant_sessions as rows
from onebox.sandbox.base import ExecRequest, ExecResult, Limits, SandboxBackend
from onebox.store.db import Database

KILLED_EXIT = -1
SCRIPT = 'cd -- "$ONEBOX_E2B_CWD" || exit 1\nexec bash -l -c "$ONEBOX_E2B_CMD"'
Event = tuple[str, object]  # ("start", pid) | ("stdout"|"stderr", bytes) | ("end", ExitInfo)
Listener = asyncio.Queue[tuple[str, bytes] | None]


@dataclass(frozen=True)
class ExitInfo:
    exit_code: int
    exited: bool
    status: str
    error: str | None = None


@dataclass
class E2bProcess:
    pid: int
    session_id: str
    tenant_id: str
    cmd: str
    cwd: str
    task: asyncio.Task[ExecResult] | None = None
    ended: bool = False
    listeners: list[Listener] = field(default_factory=list)

    def subscribe(self) -> Listener:
        """A queue of the output printed from now on, then None at the end."""
        listener: Listener = asyncio.Queue()
        if self.ended:
            listener.put_nowait(None)
        else:
            self.listeners.append(listener)
        return listener

    def unsubscribe(self, listener: Listener) -> None:
        if listener in self.listeners:
            self.listeners.remove(listener)

    def publish(self, item: tuple[str, bytes] | None) -> None:
        self.ended = self.ended or item is None
        for listener in self.listeners:
            listener.put_nowait(item)


class E2bProcesses:
    """The running commands of every sandbox, by pid (pids start at 1000 and only grow)."""

    def __init__(self) -> None:
        self._by_pid: dict[int, E2bProcess] = {}
        self._pids = itertools.count(1000)

    def start(self, db: Database, backend: SandboxBackend, *, session_id: str, tenant_id: str,
              cmd: str, cwd: str, envs: dict[str, str],
              timeout_s: float | None) -> tuple[E2bProcess, Listener]:
        """The started command and its starter's listener (subscribed before any output)."""
        proc = E2bProcess(next(self._pids), session_id, tenant_id, cmd, cwd)
        first = proc.subscribe()
        env = {**envs, "ONEBOX_E2B_CMD": cmd, "ONEBOX_E2B_CWD": cwd or "."}
        request = ExecRequest(
            session_id=session_id, code=SCRIPT, language="bash", env=env,
            limits=Limits(timeout_s=timeout_s),
            on_output=lambda stream, data: proc.publish((stream, data)))
        proc.task = asyncio.create_task(_run(db, backend, request))
        proc.task.add_done_callback(lambda _t: self._ended(proc))
        self._by_pid[proc.pid] = proc
        return proc, first

    def _ended(self, proc: E2bProcess) -> None:
        proc.publish(None)
        self._by_pid.pop(proc.pid, None)

    def get(self, pid: int, session_id: str, tenant_id: str) -> E2bProcess | None:
        proc = self._by_pid.get(pid)
        if proc is None or proc.session_id != session_id or proc.tenant_id != tenant_id:
            return None
        return proc

    def of_session(self, session_id: str, tenant_id: str) -> list[E2bProcess]:
        return [p for p in self._by_pid.values()
                if p.session_id == session_id and p.tenant_id == tenant_id]

    def kill(self, pid: int, session_id: str, tenant_id: str) -> bool:
        proc = self.get(pid, session_id, tenant_id)
        if proc is None or proc.task is None or proc.task.done():
            return False
        proc.task.cancel()
        return True

    async def close(self) -> None:
        tasks = [p.task for p in self._by_pid.values() if p.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _run(db: Database, backend: SandboxBackend, request: ExecRequest) -> ExecResult:
    await rows.touch_session(db, request.session_id)
    return await backend.execute(request)


async def events(proc: E2bProcess, listener: Listener) -> AsyncIterator[Event]:
    """The command's start, its output as it comes (to this listener), then its end."""
    try:
        yield "start", proc.pid
        while (item := await listener.get()) is not None:
            yield item
        yield "end", exit_info(proc.task)
    finally:
        proc.unsubscribe(listener)


def exit_info(task: asyncio.Task[ExecResult] | None) -> ExitInfo:
    if task is None or task.cancelled():
        return ExitInfo(KILLED_EXIT, False, "signal: killed", "the command was killed")
    exc = task.exception()
    if exc is not None:
        return ExitInfo(KILLED_EXIT, False, "error", f"{type(exc).__name__}: {exc}")
    result = task.result()
    if result.timed_out:
        return ExitInfo(KILLED_EXIT, False, "signal: killed", "the command timed out")
    code = result.exit_code if result.exit_code is not None else KILLED_EXIT
    return ExitInfo(code, True, f"exit status {code}", result.error)
