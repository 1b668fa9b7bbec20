"""Submitting a plan, whatever it holds: the one entry every door (API, CLI, schedules, the
Python runtime) uses. A plan of code steps and approvals is scheduled by the engine from its
graph (:mod:`onebox.runtime.engine.submit`); any other plan is scheduled by the agent on the same
queue (:mod:`onebox.runtime.agent.runs`). The engine below knows neither this choice nor the
agent."""

from __future__ import annotations

from collections.abc import Sequence

from onebox.agent.plan import Plan
from onebox.config import Settings
from onebox.runtime.agent.runs import insert_agent_plan, submit_agent_plan
from onebox.runtime.engine.run_files import RunFile
from onebox.runtime.engine.submit import (
    Submitted,
    on_plan_index,
    submit_indexed_plan,
    submit_indexed_plan_in,
)
from onebox.store import runs as store
from onebox.store.db import Database


async def submit_plan(db: Database, settings: Settings, plan: Plan, *, name: str | None = None,
                      idempotency_key: str | None = None, tenant_id: str = "default",
                      inputs: Sequence[RunFile] = ()) -> Submitted:
    """Store a run for ``plan`` and queue its first steps. Same idempotency key: same run."""
    submit = submit_indexed_plan if on_plan_index(plan) else submit_agent_plan
    return await submit(db, settings, plan, name=name, idempotency_key=idempotency_key,
                        tenant_id=tenant_id, inputs=inputs)


async def submit_plan_in(conn: store.Conn, settings: Settings, plan: Plan, *,
                         name: str | None = None, idempotency_key: str | None = None,
                         tenant_id: str = "default", inputs: Sequence[RunFile] = ()) -> Submitted:
    """:func:`submit_plan` inside the caller's transaction."""
    insert = submit_indexed_plan_in if on_plan_index(plan) else insert_agent_plan
    return await insert(conn, settings, plan, name=name, idempotency_key=idempotency_key,
                        tenant_id=tenant_id, inputs=inputs)
