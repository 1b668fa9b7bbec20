"""Accepting work: a run row, its first plan version, its first ready steps, and their events."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from onebox.agent.hashing import canonical_hash
from onebox.agent.plan import Plan
from onebox.bounds import check_plan_caps
from onebox.config import Settings
from onebox.errors import Conflict, PlanError
from onebox.runtime.schedule import PlanIndex, StepState, ready_steps, step_input_hash
from onebox.runtime.step_context import check_plan_tools
from onebox.store import runs as store
from onebox.store.db import Database


@dataclass(frozen=True)
class Submitted:
    run_id: uuid.UUID
    trace_id: str
    existing: bool = False


def new_trace_id() -> str:
    return secrets.token_hex(16)


def session_id_for(run_id: uuid.UUID) -> str:
    """All steps of a run share one sandbox session (one workspace)."""
    return f"run-{run_id}"


async def submit_plan(
    db: Database,
    settings: Settings,
    plan: Plan,
    *,
    name: str | None = None,
    idempotency_key: str | None = None,
    tenant_id: str = "default",
) -> Submitted:
    """Store a run for ``plan`` and queue its first steps. Same idempotency key: same run."""
    async with db.transaction() as conn:
        return await submit_plan_in(conn, settings, plan, name=name,
                                    idempotency_key=idempotency_key, tenant_id=tenant_id)


async def submit_plan_in(
    conn: store.Conn,
    settings: Settings,
    plan: Plan,
    *,
    name: str | None = None,
    idempotency_key: str | None = None,
    tenant_id: str = "default",
) -> Submitted:
    """`submit_plan` inside the caller's transaction."""
    await check_plan_tools(conn, plan)
    check_runnable(plan)
    check_plan_caps(plan, settings.sandbox)
    submitted = await insert_run(conn, "plan", {"plan": plan.to_data()}, name=name or plan.name,
                                 idempotency_key=idempotency_key, tenant_id=tenant_id)
    if submitted.existing:
        return submitted
    run_id, trace_id = submitted.run_id, submitted.trace_id
    plan_id = await create_plan_version(conn, run_id, trace_id, plan, version=1, reason="submitted")
    await queue_ready_steps(conn, settings, run_id, trace_id, plan_id, PlanIndex.of(plan), {})
    return Submitted(run_id, trace_id)


async def insert_run(
    conn: store.Conn, source: str, request: dict[str, Any], *, name: str | None,
    idempotency_key: str | None, tenant_id: str,
) -> Submitted:
    """The run row and its run_submitted event; the existing run when the tenant used the key
    for the same request, Conflict when it used it for another one."""
    run_id, trace_id = uuid.uuid4(), new_trace_id()
    digest = request_hash(source, request, name)
    inserted = await store.fetch_one(conn, "insert_run", {
        "id": run_id, "trace_id": trace_id, "source": source, "request": Jsonb(request),
        "request_hash": digest, "name": name, "idempotency_key": idempotency_key,
        "tenant_id": tenant_id})
    if inserted is None:
        assert idempotency_key is not None  # only a used key makes the insert a no-op
        return await existing_run(conn, tenant_id, idempotency_key, digest)
    await store.append_event(conn, run_id, "run_submitted", {
        "source": source, "name": name, "idempotency_key": idempotency_key,
        "tenant_id": tenant_id, **({"task": request["task"]} if source == "task" else {}),
    }, trace_id=trace_id)
    return Submitted(run_id, trace_id)


def request_hash(source: str, request: dict[str, Any], name: str | None) -> str:
    """What an idempotency key stands for: the canonical hash of the whole request."""
    return canonical_hash({"source": source, "request": request, "name": name})


async def existing_run(conn: store.Conn, tenant_id: str, key: str, digest: str) -> Submitted:
    """The run the tenant submitted with ``key``, if it was for the request hashed ``digest``."""
    row = await store.fetch_one(conn, "run_by_idempotency_key", {"tenant_id": tenant_id,
                                                                 "key": key})
    if row is None:  # removed between the insert and this read
        raise Conflict(f"idempotency key '{key}' was in use by a run that is gone; submit again",
                       field="idempotency_key")
    stored = row["request_hash"] or request_hash(row["source"], row["request"], row["name"])
    if stored != digest:
        raise Conflict(
            f"idempotency key '{key}' was already used for run {row['id']} with a different "
            f"request; resend the same request to get run {row['id']} back, or use a new key "
            "for a new request", field="idempotency_key")
    return Submitted(row["id"], row["trace_id"], existing=True)


def check_runnable(plan: Plan) -> None:
    """Refuse, before anything is stored, steps this runtime cannot execute by itself."""
    for step in plan.steps:
        if step.kind == "approval":
            continue
        if step.kind != "code":
            raise PlanError(f"steps of kind '{step.kind}' need the agent runtime; a plan file "
                            "runs code steps (tool + code)", step=step.id, field="kind")
        if step.code is None or step.tool is None:
            raise PlanError("a code step in a plan file needs both 'tool' and 'code' (a 'goal' "
                            "alone needs the agent to write the code)", step=step.id,
                            field="code" if step.code is None else "tool")
        for name in ("when", "foreach", "until"):
            if getattr(step, name) is not None:
                raise PlanError(f"'{name}' needs the agent runtime; remove it to run this plan "
                                "file directly", step=step.id, field=name)


async def create_plan_version_once(
    conn: store.Conn, run_id: uuid.UUID, trace_id: str, plan: Plan, *, version: int, reason: str
) -> None:
    """Store plan ``version`` unless it is stored already (an agent run replaying its log)."""
    if await store.fetch_one(conn, "plan_version_id", {"run_id": run_id, "version": version}):
        return
    await create_plan_version(conn, run_id, trace_id, plan, version=version, reason=reason)


async def create_plan_version(
    conn: store.Conn, run_id: uuid.UUID, trace_id: str, plan: Plan, *, version: int, reason: str
) -> uuid.UUID:
    plan_id = uuid.uuid4()
    spec = plan.to_data()
    await store.execute(conn, "insert_plan", {
        "id": plan_id, "run_id": run_id, "version": version, "spec": Jsonb(spec),
        "spec_hash": canonical_hash(spec), "reason": reason,
    })
    await store.execute(conn, "set_current_plan", {
        "run_id": run_id, "plan_id": plan_id, "steps_left": len(plan.steps)})
    await store.append_event(conn, run_id, "plan_created", {
        "plan_id": str(plan_id), "version": version, "reason": reason,
        "steps": [s.id for s in plan.steps],
    }, trace_id=trace_id)
    return plan_id


async def queue_ready_steps(
    conn: store.Conn,
    settings: Settings,
    run_id: uuid.UUID,
    trace_id: str,
    plan_id: uuid.UUID,
    index: PlanIndex,
    states: dict[str, StepState],
    candidates: Collection[str] | None = None,
) -> list[str]:
    """Insert a PENDING first attempt for every step that became ready; return their ids."""
    numbers = index.numbers
    queued = []
    for step in ready_steps(index.plan, states, candidates):
        approval = step.kind == "approval"
        execution_id = await queue_attempt(conn, {
            "run_id": run_id, "plan_id": plan_id, "trace_id": trace_id, "step_id": step.id,
            "step_number": numbers[step.id], "tool_name": step.tool or step.kind,
            "input_hash": step_input_hash(step, states),
            "max_attempts": 1 if approval else step.max_attempts or settings.runtime.max_attempts,
        }, attempt=1, delay_s=0.0, hold=approval)
        if approval:
            await request_approval(conn, run_id, trace_id, step.id, step.input.get("prompt"),
                                   execution_id, description=step.description)
        queued.append(step.id)
    return queued


async def request_approval(
    conn: store.Conn, run_id: uuid.UUID, trace_id: str, step_id: str, prompt: Any,
    execution_id: uuid.UUID, *, description: str | None = None,
) -> None:
    """An approval step waits, unclaimable, until a person decides; the run shows WAITING."""
    await store.execute(conn, "set_run_status", {
        "run_id": run_id, "status": "WAITING", "from_states": ["PENDING", "RUNNING"]})
    await store.append_event(conn, run_id, "approval_requested", {
        "step_id": step_id, "execution_id": str(execution_id), "prompt": prompt,
        "description": description,
    }, trace_id=trace_id, execution_id=execution_id)


async def queue_attempt(
    conn: store.Conn, base: dict[str, Any], *, attempt: int, delay_s: float, hold: bool = False
) -> uuid.UUID:
    """Insert one PENDING attempt with its event, and wake the workers.

    ``hold=True`` queues it unclaimable (an approval waiting for a person).
    """
    execution_id = uuid.uuid4()
    payload = {
        "execution_id": str(execution_id), "step_id": base["step_id"],
        "step_number": base["step_number"], "attempt": attempt, "tool": base["tool_name"],
        "input_hash": base["input_hash"], "delay_s": delay_s, "plan_id": str(base["plan_id"]),
        "max_attempts": base["max_attempts"],
    }
    await store.execute(conn, "insert_step", {
        **base, "id": execution_id, "session_id": session_id_for(base["run_id"]),
        "attempt": attempt, "delay_s": delay_s, "waiting_for": "approval" if hold else None,
        "details": Jsonb({}), "payload": Jsonb(payload),
    })
    return execution_id
