"""Task runs: the agent inside the durable runtime.

A task run ("work out the revenue per region from sales.csv") starts without a plan. A
worker claims the run itself (a lease on the run row, with a fencing token), rebuilds the
agent from the request and the observations stored so far, and performs its actions:
model calls, code checks, catalog lookups, sandboxed steps, knowledge and memory, and
approvals. Each observation is stored as an ``agent_observation`` event in one
transaction with everything it caused (the step row it finishes, the plan version or
decision the agent issued next), so a worker that takes over replays the log: a model
call or a step that finished is never performed again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from onebox.agent.actions import (
    Action,
    AskApproval,
    CallModel,
    CheckCode,
    CheckResult,
    Finish,
    LookupTools,
    Observation,
    RecordIntent,
    RecordPlan,
    SkipStep,
    StepAction,
    observation_from_dict,
)
from onebox.agent.loop import Agent
from onebox.agent.state import AgentConfig
from onebox.config import Settings
from onebox.errors import LeaseLost
from onebox.llm.base import ChatModel
from onebox.llm.registry import price_table
from onebox.runtime.agent_steps import Performed, StepPerformer
from onebox.runtime.archive import finish_run
from onebox.runtime.model_calls import call_model
from onebox.runtime.sessions import touch_session
from onebox.runtime.step_context import sandbox_facts, with_catalog_names, workspace_listing
from onebox.runtime.submit import create_plan_version_once, insert_run, session_id_for
from onebox.runtime.tools import lookup_tools
from onebox.runtime.workspaces import StepWorkspace
from onebox.sandbox.base import ExecRequest, SandboxBackend
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)
STORED_ACTION_KEYS = ("id", "type", "decision", "step_id", "instance", "attempt", "purpose",
                      "plan_version", "version", "reason", "changes", "ok", "answer", "error")


async def submit_task(
    db: Database, task: str, *, name: str | None = None, idempotency_key: str | None = None,
    tenant_id: str = "default",
) -> tuple[uuid.UUID, bool]:
    """Store a task run for a worker to drive; returns (run_id, existing)."""
    async with db.transaction() as conn:
        submitted = await insert_run(conn, "task", {"task": task}, name=name or task[:80],
                                     idempotency_key=idempotency_key, tenant_id=tenant_id)
        if not submitted.existing:
            await store.notify_work(conn)
    return submitted.run_id, submitted.existing


class TaskDriver:
    """Drives one claimed task run until it finishes, waits for a person, or loses its lease."""

    def __init__(self, db: Database, backend: SandboxBackend, settings: Settings, model: ChatModel,
                 run: store.Row, owner: str, workspaces: StepWorkspace | None = None) -> None:
        self.db, self.backend, self.settings, self.model = db, backend, settings, model
        self.workspaces = workspaces
        self.run, self.owner = run, owner
        self.run_id: uuid.UUID = run["id"]
        self.steps = StepPerformer(self, settings)
        self.waiting = False

    async def drive(self) -> None:
        await self._touch_session()
        session = session_id_for(self.run_id)
        agent = Agent(self.run["request"]["task"], config=AgentConfig(
            max_parallel=self.settings.runtime.concurrency,
            max_attempts=self.settings.runtime.max_attempts),
            facts=await sandbox_facts(self.backend, session),
            files=await workspace_listing(self.backend.workspace(session)))
        observations, stored_ids = await self._log()
        actions = agent.resume(observations) if observations else agent.start()
        await self._record(actions, None, stored_ids)
        pending = {asyncio.create_task(self._perform(a)): a for a in actions
                   if a.expects_observation}
        try:
            while pending:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    action = pending.pop(task)
                    performed = task.result()
                    if performed is None:  # an approval is waiting for a person
                        continue
                    issued = agent.observe(performed.observation)
                    await self._record(issued, performed, stored_ids)
                    pending.update({asyncio.create_task(self._perform(a)): a for a in issued
                                    if a.expects_observation})
                    log.debug("observed %s for %s", performed.observation.type, action.id)
        finally:
            for task in pending:
                task.cancel()
        if self.waiting and not agent.finished:
            await self._wait_for_person()

    async def _touch_session(self) -> None:
        """Record the run's sandbox session, so the run's end releases its workspace and
        image (``release_finished_sessions``), as it does for plan runs."""
        async with self.db.transaction() as conn:
            await touch_session(conn, session_id_for(self.run_id), self.run_id, self.backend.name)

    async def _log(self) -> tuple[list[Observation], set[str]]:
        async with self.db.connection() as conn:
            rows = await store.fetch_all(conn, "agent_log", {"run_id": self.run_id})
        observations = [observation_from_dict(r["payload"]) for r in rows
                        if r["type"] == "agent_observation"]
        return observations, {r["payload"]["id"] for r in rows if r["type"] == "agent_action"}

    def fenced(self) -> _Fenced:
        """A transaction that only commits while this worker still holds the run's lease."""
        return _Fenced(self)

    async def _record(self, actions: list[Action], done: Performed | None,
                      stored_ids: set[str]) -> None:
        """Store an observation, what it finishes, and the actions it caused: one transaction."""
        async with _Fenced(self) as conn:
            ids = {"trace_id": self.run["trace_id"]}
            if done is not None:
                execution_id = await done.finish(conn) if done.finish else None
                await store.append_event(conn, self.run_id, "agent_observation",
                                         done.observation.to_dict(),
                                         execution_id=execution_id, **ids)
            for action in actions:
                if action.id in stored_ids:
                    continue
                stored_ids.add(action.id)
                await store.append_event(conn, self.run_id, "agent_action", _summary(action), **ids)
                await self._notice(conn, action)

    async def _notice(self, conn: store.Conn, action: Action) -> None:
        trace = {"trace_id": self.run["trace_id"]}
        if isinstance(action, RecordIntent):
            await store.append_event(conn, self.run_id, "intent", action.intent.to_dict(), **trace)
        elif isinstance(action, RecordPlan):
            await create_plan_version_once(conn, self.run_id, self.run["trace_id"], action.plan,
                                           version=action.version, reason=action.reason)
        elif isinstance(action, SkipStep):
            await store.append_event(conn, self.run_id, "step_skipped", {
                "step_id": action.step_id, "reason": action.decision.reason}, **trace)
        elif isinstance(action, Finish):
            run = await store.fetch_one(conn, "get_run", {"run_id": self.run_id})
            assert run is not None
            await finish_run(conn, run, "SUCCEEDED" if action.ok else "FAILED", action.error)
            await store.append_event(conn, self.run_id, "agent_finished", {
                "ok": action.ok, "answer": action.answer, "error": action.error,
                "outputs": _jsonable_outputs(action.outputs)}, **trace)

    async def _perform(self, action: Action) -> Performed | None:
        if isinstance(action, CallModel):
            return Performed(await call_model(self.db, self.model, action, run_id=self.run_id,
                                              prices=price_table(self.settings.llm)))
        if isinstance(action, CheckCode):
            return Performed(await self._check(action))
        if isinstance(action, LookupTools):
            async with self.db.connection() as conn:
                return Performed(await with_catalog_names(conn, await lookup_tools(conn, action)))
        if isinstance(action, AskApproval):
            decided = await self.steps.approval(action)
            self.waiting = self.waiting or decided is None
            return decided
        if isinstance(action, StepAction):
            return await self.steps.perform(action)
        return None

    async def _check(self, action: CheckCode) -> CheckResult:
        argv = ("bash", "-n", "/dev/stdin") if action.language == "bash" \
            else ("node", "--check", "/dev/stdin")
        result = await self.backend.execute(ExecRequest(
            session_id=session_id_for(self.run_id), argv=argv, stdin=action.code.encode(),
            trace_id=self.run["trace_id"]))
        return CheckResult(action.id, result.ok, (result.stderr or result.stdout).strip()[:2000])

    async def _wait_for_person(self) -> None:
        async with _Fenced(self) as conn:
            await store.execute(conn, "set_run_status", {
                "run_id": self.run_id, "status": "WAITING", "from_states": ["RUNNING"]})
            await store.execute(conn, "release_run_lease", {
                "run_id": self.run_id, "token": self.run["fencing_token"]})


class _Fenced:
    def __init__(self, driver: TaskDriver) -> None:
        self.driver = driver
        self._tx: Any = None

    async def __aenter__(self) -> store.Conn:
        self._tx = self.driver.db.transaction()
        conn: store.Conn = await self._tx.__aenter__()
        d = self.driver
        if await store.fetch_one(conn, "fence_run", {"run_id": d.run_id, "owner": d.owner,
                                                     "token": d.run["fencing_token"]}) is None:
            await self._tx.__aexit__(None, None, None)
            raise LeaseLost(f"run {d.run_id}: this worker's lease (token "
                            f"{d.run['fencing_token']}) was taken over; its writes are refused")
        return conn

    async def __aexit__(self, *exc: Any) -> None:
        await self._tx.__aexit__(*exc)


def _summary(action: Action) -> dict[str, Any]:
    """The action as stored: what `onebox explain` needs, without large payloads."""
    data = action.to_dict()
    return {k: data[k] for k in STORED_ACTION_KEYS if k in data}


def _jsonable_outputs(outputs: Any) -> Any:
    return {str(k): v for k, v in dict(outputs or {}).items()}


async def claim_task_runs(
    db: Database, settings: Settings, owner: str, limit: int, *, run_id: uuid.UUID | None = None
) -> list[store.Row]:
    """Claim task runs (unleased, or whose lease expired) for this worker to drive."""
    if limit <= 0:
        return []
    async with db.connection() as conn:
        return await store.fetch_all(conn, "claim_task_runs", {
            "owner": owner, "limit": limit, "lease_s": settings.runtime.lease_s, "run_id": run_id})


async def renew_run_leases(
    db: Database, settings: Settings, owner: str, ids: list[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """Extend this worker's run leases; returns {run_id: status} for those still held."""
    if not ids:
        return {}
    async with db.connection() as conn:
        rows = await store.fetch_all(conn, "renew_run_leases", {
            "ids": ids, "owner": owner, "lease_s": settings.runtime.lease_s})
    return {r["id"]: r["status"] for r in rows}


async def fail_task_run(db: Database, run: store.Row, error: str) -> None:
    """End a task run whose agent cannot go on (no model configured, provider down...)."""
    async with db.transaction() as conn:
        current = await store.fetch_one(conn, "fence_run", {
            "run_id": run["id"], "owner": run["lease_owner"], "token": run["fencing_token"]})
        if current is not None:
            await finish_run(conn, current, "FAILED", error)


async def release_run_leases(db: Database, owner: str, ids: list[uuid.UUID]) -> None:
    """Give up run leases now so another worker resumes those runs at once."""
    if ids:
        async with db.connection() as conn:
            await store.execute(conn, "expire_run_leases", {"ids": ids, "owner": owner})
