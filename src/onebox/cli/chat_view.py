"""What `onebox chat` shows while a turn runs.

On a terminal: the foreground view of `onebox run "<task>"` (a line as each step starts
and ends, what runs now and its last lines redrawn in place). Anywhere else (stdin and
stdout piped, a script, a test): plain lines, one per step as it starts and ends, and the
steps' output as it is printed. The agent's own work (its model calls, code checks, the
turn's upkeep calls) is left out of both: `onebox show RUN` has it.
In both, the answer is shown as soon as the agent has it (when the turn's upkeep steps are
queued), before the upkeep runs; a turn whose run WAITS after its agent finished (its
upkeep is waiting for the model provider) says the reason it waits.
"""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import Any

from rich.console import Console

from onebox.cli.foreground import Progress
from onebox.cli.render import (
    answer_panel,
    is_agent_work,
    safe_text,
    step_ended_line,
    step_started_line,
)
from onebox.runtime.engine import live_logs
from onebox.runtime.services import runs as runs_api
from onebox.runtime.threads.steps import is_upkeep_row
from onebox.store.db import Database

ENDED_STATUSES = frozenset({"SUCCESS", "FAILED"})
SHOWN_STATUSES = ENDED_STATUSES | {"RUNNING"}


class TurnView:
    """The live view of one turn's run; ``answered`` once its answer was printed."""

    def __init__(self, db: Database, run_id: uuid.UUID, console: Console) -> None:
        self.db, self.run_id, self.console = db, run_id, console
        self.plain = not console.is_terminal
        self.progress = Progress(db, run_id, console, live=not self.plain, lines=not self.plain)
        self.statuses: dict[uuid.UUID, str] = {}
        self.after_seq = 0
        self.answered = False
        self.reason: str | None = None
        self.noted: set[uuid.UUID] = set()

    def __enter__(self) -> TurnView:
        self.progress.__enter__()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.progress.__exit__(et, e, tb)

    def stop(self) -> None:
        self.progress.stop()

    async def update(self, run_id: uuid.UUID) -> None:
        steps = await runs_api.run_steps(self.db, run_id)  # read once for every view below
        await self.progress.update(run_id, steps)
        if self.plain:
            await self._plain(steps)
        if not self.answered:
            await self._answer_before_upkeep(steps)
        self._notes(steps)
        await self._waiting()

    def _notes(self, steps: list[dict[str, Any]]) -> None:
        """What the turn's upkeep could not keep (the model's reply had no facts), once."""
        for step in steps:
            note = (step.get("details") or {}).get("note") if is_upkeep_row(step) else None
            if note and step["status"] == "SUCCESS" and step["id"] not in self.noted:
                self.noted.add(step["id"])
                self.console.print(f"note: {note}", style="yellow", markup=False,
                                   highlight=False, soft_wrap=True)

    async def _answer_before_upkeep(self, steps: list[dict[str, Any]]) -> None:
        """The agent's answer, printed once the turn's upkeep steps exist (the agent is done)."""
        if any(is_upkeep_row(step) for step in steps) and \
                (answer := await self._agent_answer()) is not None:
            self.answered = True
            self.console.print(answer_panel({"answer": answer}) or answer)
            self._line("the turn's upkeep (its facts, the summary) runs now; Ctrl-C leaves it "
                       "to the workers")

    async def _plain(self, steps: list[dict[str, Any]]) -> None:
        """Each step's start, the output it printed since, then its end, in step order."""
        output: dict[str, list[str]] = {}
        for row in await live_logs.log_events(self.db, self.run_id, after=self.after_seq):
            self.after_seq = max(self.after_seq, int(row["seq"]))
            if row["type"] == "step_output":
                output.setdefault(row["payload"]["execution_id"], []).append(
                    str(row["payload"]["text"]))
        for step in steps:
            texts = output.pop(str(step["id"]), [])
            if not is_agent_work(step):  # the agent's model calls and checks: `onebox show`
                self._step(step, texts)
        for texts in output.values():  # a step not listed yet: its output all the same
            self._text("".join(texts))

    def _step(self, step: dict[str, Any], texts: list[str]) -> None:
        status, shown = str(step["status"]), self.statuses.get(step["id"])
        if shown is None and status in SHOWN_STATUSES:
            self.statuses[step["id"]] = shown = "RUNNING"
            self._line(step_started_line(step))
        if texts:
            self._text("".join(texts))
        if status in ENDED_STATUSES and shown != status:
            self.statuses[step["id"]] = status
            self._line(step_ended_line(step))

    def _text(self, text: str) -> None:
        self.console.print(safe_text(text), end="" if text.endswith("\n") else "\n", markup=False,
                           highlight=False, soft_wrap=True)

    async def _waiting(self) -> None:
        run = await runs_api.get_run(self.db, self.run_id)
        if run["status"] != "WAITING" or run["error"] == self.reason:
            return
        self.reason = run["error"]
        if not self.answered and (answer := await self._agent_answer()) is not None:
            self.answered = True
            self.console.print(answer_panel({"answer": answer}) or answer)
        self._line(f"the run is waiting: {self.reason}")

    async def _agent_answer(self) -> str | None:
        events = await runs_api.run_events(self.db, self.run_id)
        done: list[dict[str, Any]] = [e["payload"] for e in events
                                      if e["type"] == "agent_finished"]
        if done and done[-1].get("ok") and done[-1].get("answer"):
            return str(done[-1]["answer"])
        return None

    def _line(self, text: str) -> None:
        self.console.print(text, style="dim", markup=False, highlight=False, soft_wrap=True)
