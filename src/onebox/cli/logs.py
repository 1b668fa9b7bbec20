"""`onebox logs RUN [STEP] [-f]`: what a run's steps printed, live.

Prints the ``step_output`` events of the run (of STEP only when given): stdout to stdout,
stderr to stderr. Without ``-f`` the output is grouped by attempt, attempts in step order
(in time order within a step), each under a ``==> step b, attempt 2 <==`` line (a single
step's only attempt needs none). ``-f`` prints as the steps print, a ``==> step <==`` line
where the step changes (all steps): it follows the run while it is running, through the
same gap-free event stream as SSE, and returns when it ends. Live logs are capped per step
(``runtime.live_log_max_bytes``); the complete output of a finished step is in
`onebox show`.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

import click

from onebox.api.events import EventHub, Recheck, run_event_stream
from onebox.cli import common
from onebox.cli.render import safe_text
from onebox.errors import NotFound
from onebox.runtime.engine import live_logs
from onebox.runtime.services import runs as runs_api
from onebox.store.db import Database
from onebox.store.runs import TERMINAL_RUN_STATES

LOG_TYPES = frozenset({"step_output", "step_output_truncated"})
FOLLOW_POLL_S = 0.1  # the event hub's poll while following
RECHECK_S = 0.5  # how often a follower asks whether the run is still going


def register(main: click.Group) -> None:
    main.add_command(logs_cmd)


@click.command("logs")
@click.argument("run_id")
@click.argument("step", required=False)
@click.option("-f", "--follow", is_flag=True, help="keep printing while the run runs")
@click.option("--raw", is_flag=True, help="the bytes as printed, control sequences included "
              "(default: shown escaped, so output cannot drive the terminal)")
def logs_cmd(run_id: str, step: str | None, follow: bool, raw: bool) -> None:
    """Print what RUN's steps printed (of STEP only), as they print it with -f."""
    settings = common.settings()

    async def work(db: Database) -> None:
        rid = await runs_api.resolve_id(db, run_id)
        await runs_api.get_run(db, rid)  # NotFound for an unknown run
        if step is not None:
            await _check_step(db, rid, step)
        if not follow:
            await _print_by_attempt(db, rid, step, raw=raw)
            return
        printer = Printer(show_steps=step is None, raw=raw)
        last = await _print_stored(db, rid, step, printer, after=0)
        last = await _follow(db, rid, step, printer, last)
        await _print_stored(db, rid, step, printer, after=last)

    common.with_db(settings, work)


@dataclass
class Printer:
    """Writes log events: text to its stream, a header when the step changes."""

    show_steps: bool
    raw: bool = False
    step: str | None = None
    last_seq: int = 0

    def write(self, event: dict[str, Any]) -> None:
        self.last_seq = max(self.last_seq, int(event["seq"]))
        payload = event["payload"]
        if self.show_steps and payload["step_id"] != self.step:
            self.step = payload["step_id"]
            click.echo(f"==> {safe_text(str(self.step))} <==")
        if event["type"] == "step_output_truncated":
            click.echo(f"[onebox] {safe_text(str(payload['message']))}", err=True)
        else:
            text = payload["text"] if self.raw else safe_text(payload["text"])
            click.echo(text, nl=False, err=payload["stream"] == "stderr")


async def _print_by_attempt(db: Database, run_id: uuid.UUID, step: str | None, *,
                            raw: bool) -> None:
    """The stored output, attempt after attempt, each under a header naming the step and the
    attempt (a single step's only attempt needs none)."""
    printer = Printer(show_steps=False, raw=raw)
    labelled = step is None or await _attempts(db, run_id, step) > 1
    shown = None
    async with contextlib.aclosing(live_logs.log_events_by_attempt(db, run_id,
                                                                   step_id=step)) as rows:
        async for row in rows:
            if labelled and row["execution_id"] != shown:
                shown = row["execution_id"]
                click.echo(f"==> step {safe_text(str(row['step_id']))}, "
                           f"attempt {row['attempt']} <==")
            printer.write(row)


async def _attempts(db: Database, run_id: uuid.UUID, step: str) -> int:
    return sum(1 for s in await runs_api.run_steps(db, run_id) if s["step_id"] == step)


async def _check_step(db: Database, run_id: uuid.UUID, step: str) -> None:
    known = sorted({s["step_id"] for s in await runs_api.run_steps(db, run_id)})
    if step not in known:
        raise NotFound(f"run {run_id} has no step '{step}'; its steps: {', '.join(known)}")


async def _print_stored(db: Database, run_id: uuid.UUID, step: str | None, printer: Printer,
                        *, after: int) -> int:
    """Print the stored log events after ``after``; returns the last seq read."""
    while True:
        rows = await live_logs.log_events(db, run_id, after=after, step_id=step)
        for row in rows:
            printer.write(row)
        after = max(after, printer.last_seq)
        if len(rows) < live_logs.PAGE:
            return after


async def _follow(db: Database, run_id: uuid.UUID, step: str | None, printer: Printer,
                  after: int) -> int:
    """Print new log events until the run has ended; returns the last seq printed."""
    async def running() -> bool:
        return (await runs_api.get_run(db, run_id))["status"] not in TERMINAL_RUN_STATES

    if not await running():
        return after
    hub = EventHub(db, poll_s=FOLLOW_POLL_S)
    try:
        stream = run_event_stream(hub, run_id, after, RECHECK_S, Recheck(running, RECHECK_S))
        async with contextlib.aclosing(stream):  # no reader left running on the pool after
            async for event in stream:
                if event is None:
                    if not await running():
                        break
                    continue
                if event["type"] in LOG_TYPES and step in (None, event["payload"]["step_id"]):
                    printer.write(event)
                after = max(after, int(event["seq"]))
    finally:
        await hub.close()
    return after
