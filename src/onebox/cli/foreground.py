"""A foreground `onebox run`: live progress, approvals to decide, and Ctrl-C.

    with Progress(db, run_id, console, live=True) as watch, \
            CtrlC(db, run_id, console, on_first=watch.stop) as ctrl_c:
        await rt.drive(run_id, progress=watch.update)
    if ctrl_c.pressed: ...

A step waiting for a person is announced once, with the exact `onebox approve` commands.

The first SIGINT cancels the run the way `onebox cancel` and the API do (one transaction);
this process's worker sees the cancel at its next heartbeat, stops the step and returns.
The second SIGINT prints how to follow the run and exits with 130 without waiting for
anything: the sandboxes die with this process (bwrap --die-with-parent).

When the run has ended, a step another worker holds still runs until that worker's next
heartbeat stops it (a lost worker's, until its lease expires): ``settle`` waits for that,
bounded, so the final table shows how every step ended.

With ``keep`` (a test asked at the first SIGINT), a run that should not be cancelled (a chat
turn already answered, its upkeep left) is left to the workers instead: ``on_keep`` is
called to stop driving it here, and nothing is cancelled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from onebox.cli.render import (
    ENDED_STEP_STATUSES,
    approval_hint,
    is_agent_work,
    step_ended_line,
    step_started_line,
    steps_table,
    waiting_approvals,
)
from onebox.config import Settings
from onebox.errors import Conflict, OneboxError
from onebox.runtime.engine import live_logs
from onebox.runtime.engine.queue import sweep_expired
from onebox.runtime.services import runs as runs_api
from onebox.store.db import Database

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what shells report for a process ended by Ctrl-C
TAIL_LINES = 5  # the running steps' last lines of output shown under the table
SETTLE_POLL_S = 0.2  # how often `settle` looks at the ended run's steps


class Progress:
    """The steps table, redrawn in place (``live``) with the running steps' last lines
    (live logs), and a line for each new approval wait.

    With ``lines`` (a task's default view), the user's steps are a line each as they start
    and as they end instead, the agent's own work (model calls, checks) is left out, and
    the live part is only what is running and its last lines."""

    def __init__(self, db: Database, run_id: uuid.UUID, console: Console, *, live: bool,
                 lines: bool = False) -> None:
        self.db, self.run_id, self.console = db, run_id, console
        self.live = Live(console=console, refresh_per_second=8, transient=True) if live else None
        self.announced: set[uuid.UUID] = set()
        self.lines = StepLines(console) if lines else None

    def __enter__(self) -> Progress:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    async def update(self, run_id: uuid.UUID, steps: list[dict[str, Any]] | None = None) -> None:
        """Redraw from ``steps`` (the run's steps, read here when not given)."""
        steps = await runs_api.run_steps(self.db, run_id) if steps is None else steps
        waiting = waiting_approvals(steps)
        for step in waiting:
            if step["id"] not in self.announced:
                self.announced.add(step["id"])
                self.console.print(approval_hint(run_id, step["step_id"]), style="cyan",
                                   markup=False, soft_wrap=True)
        if self.lines is not None:
            self.lines.update(steps)
        if self.live is not None:
            title = "waiting for approval" if waiting else "running..."
            running = [step for step in steps if step["status"] == "RUNNING"]
            lines = await live_logs.last_lines(self.db, run_id, [s["id"] for s in running],
                                               TAIL_LINES)
            head = steps_table(steps, title=title) if self.lines is None else \
                Text(running_text(running) if not waiting else title, style="dim")
            tail = Text("\n".join(lines), style="dim", no_wrap=True, overflow="ellipsis")
            self.live.update(Group(head, tail) if lines else head)


def running_text(running: list[dict[str, Any]]) -> str:
    """What runs now, in a few words: the user's steps, or the agent at work."""
    names = [s["step_id"] for s in running if not is_agent_work(s)]
    if names:
        return "running: " + ", ".join(names)
    return "the agent is working..."


class StepLines:
    """A line as each of the user's step attempts starts and as it ends (its status, its
    error); the agent's own work is left out."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.shown: dict[uuid.UUID, str] = {}

    def update(self, steps: list[dict[str, Any]]) -> None:
        for step in steps:
            if is_agent_work(step):
                continue
            status, shown = str(step["status"]), self.shown.get(step["id"])
            if shown is None and (status == "RUNNING" or status in ENDED_STEP_STATUSES):
                self.shown[step["id"]] = shown = "RUNNING"
                self._line(step_started_line(step))
            if status in ENDED_STEP_STATUSES and shown != status:
                self.shown[step["id"]] = status
                self._line(step_ended_line(step))

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


async def settle(db: Database, settings: Settings, run_id: uuid.UUID, console: Console) -> None:
    """Once the run has ended: wait until none of its steps is RUNNING, for at most a lease
    and two heartbeats (what another worker takes to stop its step, or a lost one's lease to
    expire: this process sweeps expired leases meanwhile). Ctrl-C leaves at once."""
    loop = asyncio.get_running_loop()
    runtime = settings.runtime
    deadline = loop.time() + runtime.lease_s + 2 * runtime.heartbeat_s
    told = False
    while running := [s["step_id"] for s in await runs_api.run_steps(db, run_id)
                      if s["status"] == "RUNNING"]:
        if loop.time() > deadline:
            console.print(f"still stopping on another worker: {', '.join(running)}; "
                          f"`onebox show {run_id}` shows how they end", markup=False)
            return
        if not told:
            told = True
            console.print(f"waiting for {', '.join(running)} to stop on another worker...",
                          markup=False)
        await sweep_expired(db, settings)
        await asyncio.sleep(SETTLE_POLL_S)


class CtrlC:
    def __init__(self, db: Database, run_id: uuid.UUID, console: Console,
                 *, on_first: Callable[[], None] | None = None,
                 keep: Callable[[], bool] | None = None,
                 on_keep: Callable[[], None] | None = None) -> None:
        self.db, self.run_id, self.console, self.on_first = db, run_id, console, on_first
        self.keep, self.on_keep = keep, on_keep
        self.pressed = 0
        self.cancelled = False
        self.kept = False  # left to the workers, not cancelled
        self._task: asyncio.Task[None] | None = None

    def __enter__(self) -> CtrlC:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    def _on_sigint(self) -> None:
        self.pressed += 1
        if self.pressed > 1:
            self._leave()
        if self.on_first is not None:
            self.on_first()
        if self.keep is not None and self.keep():
            self.kept = True
            self.console.print(f"leaving run {self.run_id} to the workers (not cancelled)...",
                               markup=False)
            if self.on_keep is not None:
                self.on_keep()
            return
        self.console.print(f"cancelling run {self.run_id}...", end="", markup=False)
        self.console.file.flush()
        self._task = asyncio.get_running_loop().create_task(self._cancel())

    async def _cancel(self) -> None:
        try:
            await runs_api.cancel_run(self.db, self.run_id, reason="cancelled by user (Ctrl-C)")
        except Conflict:
            run = await runs_api.get_run(self.db, self.run_id)
            self.console.print(f" not needed: the run is already {run['status']}", markup=False)
            return
        except OneboxError as exc:
            self.console.print(f" failed: {exc.message}; press Ctrl-C again to leave, then "
                               f"`onebox cancel {self.run_id}`", markup=False)
            return
        self.cancelled = True
        self.console.print(" cancelled; stopping its running steps (Ctrl-C again to leave now)",
                           markup=False)

    def _leave(self) -> None:
        state = ("is cancelled; its steps stop with this process" if self.cancelled
                 else f"may still be running: `onebox cancel {self.run_id}` cancels it")
        self.console.print(f"\nleft without waiting: run {self.run_id} {state}\n"
                           f"follow it with: onebox show {self.run_id}", markup=False,
                           soft_wrap=True)
        self.console.file.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED_EXIT)
