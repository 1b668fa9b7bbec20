"""The engine's own step kind: a plan's code step (or approval), run in the sandbox through
:class:`onebox.runtime.engine.executor.StepRunner` and archived with
:func:`onebox.runtime.engine.archive.archive_step`. Registered as the ``code`` entry point of
``onebox.step_kinds``, like any other kind; it takes every row no other kind claims."""

from __future__ import annotations

from onebox.config import Settings
from onebox.runtime.engine.archive import advance, archive_step
from onebox.runtime.engine.kinds import Performed, Worker
from onebox.runtime.engine.plans import load_plan_version
from onebox.runtime.engine.sessions import touch_session
from onebox.store import runs as store


class CodeSteps:
    name = "code"
    priority = 0
    interruptible = False  # stopping one goes through its sandbox call, which keeps its output

    def handles(self, row: store.Row) -> bool:
        return True

    async def perform(self, worker: Worker, row: store.Row) -> Performed:
        async with worker.db.connection() as conn:
            plan = await load_plan_version(conn, row["plan_id"])
            await touch_session(conn, row["session_id"], row["run_id"], worker.backend.name)
        ran = await worker.runner.run(plan.step(row["step_id"]), row)
        return Performed(None, ran.outcome)

    async def archive(self, worker: Worker, row: store.Row, performed: Performed) -> str | None:
        return await archive_step(worker.db, worker.settings, row, performed.outcome)

    async def lost(self, conn: store.Conn, settings: Settings, run: store.Row,
                   row: store.Row) -> None:
        await advance(conn, settings, run, row, backoff=False)  # the worker failed, not the code

    def continues(self, run: store.Row) -> bool:
        return False

    async def after_answer(self, conn: store.Conn, run: store.Row) -> None:
        return None


CODE = CodeSteps()
