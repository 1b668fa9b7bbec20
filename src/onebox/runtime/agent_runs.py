"""Task runs: the agent inside the durable runtime, on the same queue as plan steps.

A task run ("work out the revenue per region from sales.csv") starts without a plan. At
submission the agent's first action (a model call for the intent) is queued like any
step. Each action's worker stores the observation in one transaction with everything it
caused (the row it finishes, the plan version or decision the agent issued next, the next
actions queued), so a crash repeats nothing that finished: a model call or a step that
finished is never performed again. See :mod:`onebox.runtime.agent_engine`.
"""

from __future__ import annotations

import uuid

from psycopg.types.json import Jsonb

from onebox.config import Settings
from onebox.errors import LeaseLost
from onebox.runtime import agent_engine
from onebox.runtime.agent_steps import Performed
from onebox.runtime.archive import finish_run, step_params
from onebox.runtime.schedule import backoff_s
from onebox.runtime.submit import insert_run
from onebox.store import runs as store
from onebox.store.db import Database


async def submit_task(
    db: Database, task: str, *, name: str | None = None, idempotency_key: str | None = None,
    tenant_id: str = "default", settings: Settings | None = None,
) -> tuple[uuid.UUID, bool]:
    """Store a task run and queue the agent's first action; returns (run_id, existing)."""
    request = {"task": task, "agent": agent_engine.agent_config(settings)}
    async with db.transaction() as conn:
        submitted = await insert_run(conn, "task", request, name=name or task[:80],
                                     idempotency_key=idempotency_key, tenant_id=tenant_id)
        if not submitted.existing:
            run = await store.fetch_one(conn, "get_run", {"run_id": submitted.run_id})
            assert run is not None
            await agent_engine.start(conn, run)
    return submitted.run_id, submitted.existing


async def archive_agent_step(
    db: Database, claimed: store.Row, performed: Performed
) -> str | None:
    """Write the attempt's result and the agent's observation of it; queue what the agent
    does next. Returns the run's new terminal state, if any."""
    outcome = performed.outcome
    async with db.transaction() as conn:
        run = await store.fetch_one(conn, "lock_run_for_archive", {
            "run_id": claimed["run_id"], "succeeded": 0})
        row = await store.fetch_one(conn, "finish_step", {
            "id": claimed["id"], "fencing_token": claimed["fencing_token"],
            **step_params(outcome), "details": Jsonb(outcome.details)})
        assert run is not None
        if row is None:
            raise LeaseLost(f"agent step {claimed['step_id']} attempt {claimed['attempt']} of "
                            f"run {claimed['run_id']}: lease token {claimed['fencing_token']} "
                            "is stale; another worker owns it now")
        if run["status"] in store.TERMINAL_RUN_STATES:
            return None
        if performed.observation is not None:
            return await agent_engine.observe(conn, run, row["id"], performed.observation)
        if outcome.details.get("final"):
            await finish_run(conn, run, "FAILED", outcome.error)
            return "FAILED"
        return await agent_engine.after_failure(conn, run, row, delay_s=backoff_s(row["attempt"]))
