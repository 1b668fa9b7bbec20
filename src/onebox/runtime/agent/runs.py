"""Task runs: the agent inside the durable runtime, on the same queue as plan steps.

A task run ("work out the revenue per region from sales.csv") starts without a plan. At
submission the agent's first action (a model call for the intent) is queued like any
step. Each action's worker stores the observation in one transaction with everything it
caused (the row it finishes, the plan version or decision the agent issued next, the next
actions queued), so a crash repeats nothing that finished: a model call or a step that
finished is never performed again. See :mod:`onebox.runtime.agent.engine`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import cast

from onebox.agent.actions import Observation
from onebox.agent.plan import Plan
from onebox.config import Settings
from onebox.errors import LLMNotConfigured
from onebox.runtime.agent import engine as agent_engine
from onebox.runtime.agent.steps import AgentWork
from onebox.runtime.engine.archive import archive_attempt, finish_run
from onebox.runtime.engine.kinds import Performed, Worker
from onebox.runtime.engine.run_files import RunFile
from onebox.runtime.engine.schedule import backoff_s
from onebox.runtime.engine.step_context import check_plan_tools
from onebox.runtime.engine.submit import Submitted, insert_run
from onebox.runtime.models.profiles import run_profile
from onebox.store import runs as store
from onebox.store.db import Database

OUTAGE_BACKOFF_BASE_S = 5.0
OUTAGE_BACKOFF_CAP_S = 300.0


async def submit_task(
    db: Database, task: str, *, name: str | None = None, idempotency_key: str | None = None,
    tenant_id: str = "default", settings: Settings | None = None, profile: str | None = None,
    inputs: Sequence[RunFile] = (),
) -> tuple[uuid.UUID, bool]:
    """Store a task run and queue the agent's first action; returns (run_id, existing).

    The run keeps its profile (``profile``, else the submitter's model settings): its
    model calls go only to a worker that serves that model."""
    request = {"task": task, "agent": agent_engine.agent_config(settings)}
    if profile is not None:
        request["profile"] = profile
    async with db.transaction() as conn:
        kept = await run_profile(conn, settings, tenant_id, profile)
        submitted = await insert_run(conn, "task", request, name=name or task[:80],
                                     idempotency_key=idempotency_key, tenant_id=tenant_id,
                                     profile=kept, inputs=inputs)
        if not submitted.existing:
            run = await store.fetch_one(conn, "get_run", {"run_id": submitted.run_id})
            assert run is not None
            await agent_engine.start(conn, run)
    return submitted.run_id, submitted.existing


def needs_model(plan: Plan) -> bool:
    """A plan needs a model when a step states a goal the model must write code for."""
    return any(s.kind == "code" and s.code is None for s in plan.steps)


PICK_A_PROFILE = (
    "Pick one of the tenant's stored profiles (each names its own model): `onebox run "
    "--profile NAME`, the \"profile\" field of the request, or the console's model picker; "
    "`onebox profile list` lists them and `onebox profile create` adds one. Or configure a "
    "process-wide model: ")


def require_model(settings: Settings, *, field: str, why: str, profiles: bool = False) -> None:
    """LLMNotConfigured naming the missing settings, before anything is stored; with
    ``profiles`` (the work may name a stored profile instead) it names that fix first."""
    llm = settings.llm
    missing = [n for n, v in (("ONEBOX_LLM__MODEL", llm.model), ("OPENAI_BASE_URL", llm.base_url),
                              ("OPENAI_API_KEY", llm.api_key)) if not v]
    if missing:
        how = "set ONEBOX_LLM__MODEL, OPENAI_BASE_URL and OPENAI_API_KEY."
        raise LLMNotConfigured(
            f"{why} needs a chat model: it names no profile, and no process-wide model is "
            f"configured (missing {', '.join(missing)}). "
            f"{PICK_A_PROFILE + how if profiles else how[0].upper() + how[1:]}", field=field)


async def submit_agent_plan(
    db: Database, settings: Settings, plan: Plan, *, name: str | None = None,
    idempotency_key: str | None = None, tenant_id: str = "default",
    inputs: Sequence[RunFile] = (),
) -> Submitted:
    """Store a run of a plan that the agent schedules (conditions, loops, tools, goals)."""
    async with db.transaction() as conn:
        return await insert_agent_plan(conn, settings, plan, name=name,
                                       idempotency_key=idempotency_key, tenant_id=tenant_id,
                                       inputs=inputs)


async def insert_agent_plan(
    conn: store.Conn, settings: Settings, plan: Plan, *, name: str | None = None,
    idempotency_key: str | None = None, tenant_id: str = "default",
    inputs: Sequence[RunFile] = (),
) -> Submitted:
    """`submit_agent_plan` inside the caller's transaction."""
    use_model = needs_model(plan)
    if use_model:
        goal = next(s.id for s in plan.steps if s.kind == "code" and s.code is None)
        require_model(settings, field=f"steps[{goal}].goal",
                      why=f"step {goal!r} states a goal without code, so the agent")
    await check_plan_tools(conn, plan)
    request = {"plan": plan.to_data(),
               "agent": {**agent_engine.agent_config(settings), "use_model": use_model}}
    kept = await run_profile(conn, settings, tenant_id, None) if use_model else None
    submitted = await insert_run(conn, "plan", request, name=name or plan.name,
                                 idempotency_key=idempotency_key, tenant_id=tenant_id,
                                 profile=kept, inputs=inputs)
    if not submitted.existing:
        run = await store.fetch_one(conn, "get_run", {"run_id": submitted.run_id})
        assert run is not None
        await agent_engine.start(conn, run)
    return submitted


async def archive_agent_step(
    db: Database, settings: Settings, claimed: store.Row, performed: Performed
) -> str | None:
    """Write the attempt's result and the agent's observation of it; queue what the agent
    does next. Returns the run's new terminal state, if any."""
    outcome = performed.outcome

    async def then(conn: store.Conn, run: store.Row, row: store.Row) -> str | None:
        observation = cast("Observation | None", performed.observation)
        if observation is not None and row["tool_name"] == "model" and run["status"] == "WAITING":
            await provider_back(conn, run)
        if observation is not None:
            return await agent_engine.observe(conn, run, row["id"], observation)
        if outcome.details.get("final"):
            await finish_run(conn, run, "FAILED", outcome.error)
            return "FAILED"
        if outcome.details.get("provider"):
            return await _provider_down(conn, settings, run, row)
        return await agent_engine.after_failure(conn, run, row, delay_s=backoff_s(row["attempt"]))

    return await archive_attempt(db, claimed, outcome, then)


async def _provider_down(conn: store.Conn, settings: Settings, run: store.Row,
                         row: store.Row) -> str | None:
    """The model provider failed (after the client's own retries): the run WAITS with the
    reason and the call is tried again later, up to ``llm.outage_attempts`` calls."""
    limit = settings.llm.outage_attempts
    if row["attempt"] >= limit:
        reason = (f"the model provider failed {row['attempt']} times in a row "
                  f"(llm.outage_attempts = {limit}); last: {row['error']}. "
                  f"`onebox retry {run['id']}` tries again")
        await finish_run(conn, run, "FAILED", reason)
        return "FAILED"
    delay_s = outage_backoff_s(row["attempt"])
    reason = (f"waiting for the model provider (call {row['attempt']} of {limit} failed: "
              f"{row['error']}); the next try is in {delay_s:.0f} s")
    await agent_engine.requeue(conn, {**row, "max_attempts": limit}, delay_s=delay_s)
    await store.execute(conn, "wait_for_provider", {"run_id": run["id"], "reason": reason})
    await store.append_event(conn, run["id"], "run_waiting", {
        "reason": reason, "retry_in_s": delay_s, "attempt": row["attempt"], "limit": limit},
        trace_id=run["trace_id"])
    return None


async def provider_back(conn: store.Conn, run: store.Row) -> None:
    if await store.fetch_one(conn, "provider_back", {"run_id": run["id"]}) is not None:
        await store.append_event(conn, run["id"], "run_resumed", {
            "reason": "the model provider answered again"}, trace_id=run["trace_id"])


def outage_backoff_s(attempt: int) -> float:
    """Delay before the next model call of a run whose provider is down: 5 s doubling, at
    most 5 minutes (the client already retried quickly within each call)."""
    return float(min(OUTAGE_BACKOFF_CAP_S, OUTAGE_BACKOFF_BASE_S * 2 ** max(0, attempt - 1)))


class AgentActions:
    """The agent's step kind: every attempt that performs an action of a task run (or of a
    plan beyond the plan index) is this kind's. Registered as the ``agent`` entry point of
    ``onebox.step_kinds``."""

    name = "agent"
    priority = 10
    interruptible = True  # a model call or lookup is stopped by cancelling it

    def handles(self, row: store.Row) -> bool:
        return agent_engine.is_agent_row(row)

    async def perform(self, worker: Worker, row: store.Row) -> Performed:
        return await AgentWork(worker.db, worker.runner, worker.chat_model).perform(row)

    async def archive(self, worker: Worker, row: store.Row, performed: Performed) -> str | None:
        return await archive_agent_step(worker.db, worker.settings, row, performed)

    async def lost(self, conn: store.Conn, settings: Settings, run: store.Row,
                   row: store.Row) -> None:
        await agent_engine.after_failure(conn, run, row, delay_s=0.0)

    def continues(self, run: store.Row) -> bool:
        return False

    async def after_answer(self, conn: store.Conn, run: store.Row) -> None:
        return None


AGENT = AgentActions()
