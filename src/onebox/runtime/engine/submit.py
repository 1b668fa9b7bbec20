"""Accepting work: a run row, its first plan version, its first ready steps, and their events."""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from onebox.agent.hashing import canonical_hash
from onebox.agent.plan import Plan, Step, parse_plan
from onebox.config import SandboxSettings, Settings
from onebox.errors import Conflict
from onebox.runtime.engine.plans import load_plan_index
from onebox.runtime.engine.run_files import RunFile, record_inputs
from onebox.runtime.engine.schedule import PlanIndex, StepState, ready_steps, step_input_hash
from onebox.runtime.engine.step_context import check_plan_tools
from onebox.sandbox.policy import check_limit_caps
from onebox.store import runs as store
from onebox.store.db import Database

BATCH_STEPS = 500  # first attempts per statement and per submit transaction


@dataclass(frozen=True)
class RunRef:
    """The ids every queued attempt of a run carries."""

    run_id: uuid.UUID
    trace_id: str
    plan_id: uuid.UUID


@dataclass(frozen=True)
class PreparedPlan:
    """A plan ready to store: see :func:`prepare_plan`."""

    plan: Plan
    index: PlanIndex
    name: str | None
    spec_json: str
    spec_hash: str
    digest: str  # the idempotency digest of the request {"plan": spec}


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


def run_session_id(run: Mapping[str, Any]) -> str:
    """The session a run's steps use: its thread's when the run is a thread's turn (the
    workspace persists between turns), else the run's own."""
    return str((run.get("request") or {}).get("session_id") or session_id_for(run["id"]))


async def submit_indexed_plan(
    db: Database,
    settings: Settings,
    plan: Plan,
    *,
    name: str | None = None,
    idempotency_key: str | None = None,
    tenant_id: str = "default",
    inputs: Sequence[RunFile] = (),
) -> Submitted:
    """Store a run for ``plan`` (one :func:`on_plan_index`) and queue its first steps. Same
    idempotency key: same run. Every plan goes through
    :func:`onebox.runtime.services.submission.submit_plan`, which gives the others to the agent.

    The run, its plan and a first batch of ready steps commit together (a run is never
    seen without a queued step); the other ready steps follow in short transactions of
    ``BATCH_STEPS`` each, so no transaction holds the run row or the event horizon for
    long (a crash between them is repaired by :func:`queue_missing_steps`).
    """
    check_plan_caps(plan, settings.sandbox)
    _require_indexed(plan)
    async with db.connection() as conn:
        await check_plan_tools(conn, plan)
    prep = await asyncio.to_thread(prepare_plan, plan, name or plan.name) \
        if len(plan.steps) > BATCH_STEPS else prepare_plan(plan, name or plan.name)
    ready = ready_steps(plan, {})
    async with db.transaction() as conn:
        submitted, ref = await _store_run(conn, prep, idempotency_key=idempotency_key,
                                          tenant_id=tenant_id, inputs=inputs)
        if ref is None:
            return submitted
        await queue_steps(conn, settings, ref, prep.index, ready[:BATCH_STEPS], {})
    for start in range(BATCH_STEPS, len(ready), BATCH_STEPS):
        async with db.transaction() as conn:
            await queue_steps(conn, settings, ref, prep.index, ready[start:start + BATCH_STEPS],
                              {})
    return submitted


async def submit_indexed_plan_in(
    conn: store.Conn,
    settings: Settings,
    plan: Plan,
    *,
    name: str | None = None,
    idempotency_key: str | None = None,
    tenant_id: str = "default",
    inputs: Sequence[RunFile] = (),
) -> Submitted:
    """:func:`submit_indexed_plan` inside the caller's transaction (every ready step in it,
    in batches)."""
    check_plan_caps(plan, settings.sandbox)
    _require_indexed(plan)
    await check_plan_tools(conn, plan)
    prep = prepare_plan(plan, name or plan.name)
    submitted, ref = await _store_run(conn, prep, idempotency_key=idempotency_key,
                                      tenant_id=tenant_id, inputs=inputs)
    if ref is not None:
        await queue_ready_steps(conn, settings, ref.run_id, ref.trace_id, ref.plan_id,
                                prep.index, {})
    return submitted


def prepare_plan(plan: Plan, name: str | None) -> PreparedPlan:
    """What a submission computes before its transaction opens (and off the event loop):
    the plan as JSON, its hashes, its index. A 10,000-step plan takes ~0.1 s here."""
    spec = plan.to_data()
    spec_json = json.dumps(spec)
    spec_hash = canonical_hash(spec)
    return PreparedPlan(plan, PlanIndex.of(plan), name, spec_json, spec_hash,
                        request_hash("plan", {"plan": spec}, name))


async def _store_run(
    conn: store.Conn, prep: PreparedPlan, *, idempotency_key: str | None, tenant_id: str,
    inputs: Sequence[RunFile] = (),
) -> tuple[Submitted, RunRef | None]:
    """The run row and plan version 1 with their events; no RunRef for an existing run.

    The plan is stored once, as version 1: the run's request names that version and its
    hash (the idempotency digest still covers the whole plan)."""
    submitted = await insert_run(
        conn, "plan", {"plan_version": 1, "spec_hash": prep.spec_hash}, name=prep.name,
        idempotency_key=idempotency_key, tenant_id=tenant_id, digest=prep.digest,
        inputs=inputs)
    if submitted.existing:
        return submitted, None
    run_id, trace_id = submitted.run_id, submitted.trace_id
    plan_id = await create_plan_version(conn, run_id, trace_id, prep.plan, version=1,
                                        reason="submitted",
                                        spec=(prep.spec_json, prep.spec_hash))
    return submitted, RunRef(run_id, trace_id, plan_id)


async def insert_run(
    conn: store.Conn, source: str, request: dict[str, Any], *, name: str | None,
    idempotency_key: str | None, tenant_id: str, digest: str | None = None,
    profile: dict[str, Any] | None = None, inputs: Sequence[RunFile] = (),
) -> Submitted:
    """The run row and its run_submitted event; the existing run when the tenant used the key
    for the same request, Conflict when it used it for another one.

    ``digest`` is the request's hash when the caller computed it (over more than
    ``request``, which is what the row keeps). ``inputs`` are recorded as the run's input
    files (and are part of what an idempotency key stands for)."""
    run_id, trace_id = uuid.uuid4(), new_trace_id()
    digest = digest or request_hash(source, request, name)
    if inputs:
        digest = canonical_hash({"request": digest,
                                 "inputs": sorted([f.path, f.sha256] for f in inputs)})
    inserted = await store.fetch_one(conn, "insert_run", {
        "id": run_id, "trace_id": trace_id, "source": source, "request": Jsonb(request),
        "request_hash": digest, "name": name, "idempotency_key": idempotency_key,
        "tenant_id": tenant_id, "profile": Jsonb(profile) if profile else None})
    if inserted is None:
        assert idempotency_key is not None  # only a used key makes the insert a no-op
        return await existing_run(conn, tenant_id, idempotency_key, digest)
    await store.append_event(conn, run_id, "run_submitted", {
        "source": source, "name": name, "idempotency_key": idempotency_key,
        "tenant_id": tenant_id, **({"task": request["task"]} if source == "task" else {}),
        **({"inputs": len(inputs)} if inputs else {}),
    }, trace_id=trace_id)
    await record_inputs(conn, run_id, inputs)
    return Submitted(run_id, trace_id)


def request_hash(source: str, request: dict[str, Any], name: str | None) -> str:
    """What an idempotency key stands for: the canonical hash of the whole request (the
    agent's bounds, which the server chooses, are not part of what the client asked)."""
    asked = {k: v for k, v in request.items() if k != "agent"}
    return canonical_hash({"source": source, "request": asked, "name": name})


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


def _require_indexed(plan: Plan) -> None:
    if not on_plan_index(plan):
        raise ValueError(f"plan {plan.name!r} needs the agent to schedule it; submit it with "
                         "onebox.runtime.services.submission.submit_plan")


def on_plan_index(plan: Plan) -> bool:
    """Whether the run's steps can be scheduled from the plan's graph alone: code steps
    with their code, and approvals, with no condition or loop. Every other plan (a goal
    for the model to write code for, a tool, http, knowledge or final step, ``when``,
    ``foreach``, ``until``, knowledge ``documents``) is scheduled by the agent on the same queue
    (:mod:`onebox.runtime.agent.engine`). Both validate the same plan language."""
    return all(
        (s.kind == "approval" or (s.kind == "code" and s.code is not None))
        and s.when is None and s.foreach is None and s.until is None and not s.documents
        for s in plan.steps)


async def create_plan_version_once(
    conn: store.Conn, run_id: uuid.UUID, trace_id: str, plan: Plan, *, version: int, reason: str
) -> None:
    """Store plan ``version`` unless it is stored already (an agent run replaying its log)."""
    if await store.fetch_one(conn, "plan_version_id", {"run_id": run_id, "version": version}):
        return
    await create_plan_version(conn, run_id, trace_id, plan, version=version, reason=reason)


async def copy_plan_versions(conn: store.Conn, from_run: uuid.UUID, to: Submitted,
                             upto_version: int | None = None) -> dict[uuid.UUID, uuid.UUID]:
    """The plan versions of ``from_run`` (up to ``upto_version``) as ``to``'s (a fork, a
    replay); returns each copied plan id -> its copy's."""
    ids: dict[uuid.UUID, uuid.UUID] = {}
    for row in await store.fetch_all(conn, "run_plans", {"run_id": from_run}):
        if upto_version is not None and row["version"] > upto_version:
            continue
        ids[row["id"]] = await create_plan_version(
            conn, to.run_id, to.trace_id, parse_plan(row["spec"]), version=row["version"],
            reason=row["reason"] or "", spec=(json.dumps(row["spec"]), row["spec_hash"]))
    return ids


async def create_plan_version(
    conn: store.Conn, run_id: uuid.UUID, trace_id: str, plan: Plan, *, version: int,
    reason: str, spec: tuple[str, str] | None = None,
) -> uuid.UUID:
    """Store plan ``version``; ``spec`` is its (JSON text, hash) when computed already."""
    plan_id = uuid.uuid4()
    if spec is None:
        data = plan.to_data()
        spec = (json.dumps(data), canonical_hash(data))
    text = spec[0]
    await store.execute(conn, "insert_plan", {
        "id": plan_id, "run_id": run_id, "version": version,
        "spec": Jsonb(None, dumps=lambda _: text), "spec_hash": spec[1], "reason": reason,
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
    ready = ready_steps(index.plan, states, candidates)
    ref = RunRef(run_id, trace_id, plan_id)
    for start in range(0, len(ready), BATCH_STEPS):
        await queue_steps(conn, settings, ref, index, ready[start:start + BATCH_STEPS], states)
    return [step.id for step in ready]


async def queue_steps(
    conn: store.Conn, settings: Settings, ref: RunRef, index: PlanIndex, steps: list[Step],
    states: Mapping[str, StepState],
) -> None:
    """First attempts of ``steps`` in plan order: code steps in one statement per stretch,
    approval steps one by one (each opens its approval)."""
    for approval, group in itertools.groupby(steps, key=lambda s: s.kind == "approval"):
        if approval:
            for step in group:
                await _queue_approval(conn, ref, index, step, states)
        else:
            await _queue_bulk(conn, settings, ref, index, list(group), states)


async def _queue_bulk(
    conn: store.Conn, settings: Settings, ref: RunRef, index: PlanIndex, steps: list[Step],
    states: Mapping[str, StepState],
) -> None:
    """One insert_steps statement: the attempts, their events, one wake-up."""
    await store.execute(conn, "insert_steps", {
        "run_id": ref.run_id, "plan_id": ref.plan_id, "trace_id": ref.trace_id,
        "session_id": session_id_for(ref.run_id),
        "ids": [uuid.uuid4() for _ in steps], "step_ids": [s.id for s in steps],
        "step_numbers": [index.numbers[s.id] for s in steps],
        "tool_names": [s.tool or s.kind for s in steps],
        "input_hashes": [step_input_hash(s, states) for s in steps],
        "max_attempts": [s.max_attempts or settings.runtime.max_attempts for s in steps],
    })


async def _queue_approval(
    conn: store.Conn, ref: RunRef, index: PlanIndex, step: Step, states: Mapping[str, StepState],
) -> None:
    execution_id = await queue_attempt(conn, {
        "run_id": ref.run_id, "plan_id": ref.plan_id, "trace_id": ref.trace_id,
        "step_id": step.id, "step_number": index.numbers[step.id], "tool_name": step.kind,
        "input_hash": step_input_hash(step, states), "max_attempts": 1,
    }, attempt=1, delay_s=0.0, hold=True)
    await request_approval(conn, ref.run_id, ref.trace_id, step.id, step.input.get("prompt"),
                           execution_id, description=step.description)


async def queue_missing_steps(db: Database, settings: Settings, run_id: uuid.UUID) -> int:
    """Queue the ready steps of an unfinished plan run that have no attempt (a submitter
    that died between its batches); returns how many. Idempotent."""
    async with db.transaction() as conn:
        run = await store.fetch_one(conn, "lock_run", {"run_id": run_id})
        if run is None or run["status"] in store.TERMINAL_RUN_STATES or run["source"] != "plan":
            return 0
        latest = await store.fetch_all(conn, "latest_attempts", {"run_id": run_id})
        states = {r["step_id"]: StepState(r["status"], r["attempt"], r["output_hash"])
                  for r in latest}
        index = await load_plan_index(conn, run["current_plan_id"])
        queued = await queue_ready_steps(conn, settings, run_id, run["trace_id"],
                                         run["current_plan_id"], index, states)
    return len(queued)


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
    conn: store.Conn, base: dict[str, Any], *, attempt: int, delay_s: float, hold: bool = False,
    details: dict[str, Any] | None = None,
) -> uuid.UUID:
    """Insert one PENDING attempt with its event, and wake the workers.

    ``hold=True`` queues it unclaimable (an approval waiting for a person); ``details``
    start the row's details (an agent action's id).
    """
    execution_id = uuid.uuid4()
    payload = {
        "execution_id": str(execution_id), "step_id": base["step_id"],
        "step_number": base["step_number"], "attempt": attempt, "tool": base["tool_name"],
        "input_hash": base["input_hash"], "delay_s": delay_s, "plan_id": str(base["plan_id"]) if base["plan_id"] else None,
        "max_attempts": base["max_attempts"],
    }
    await store.execute(conn, "insert_step", {
        **base, "id": execution_id,
        "session_id": base.get("session_id") or session_id_for(base["run_id"]),
        "attempt": attempt, "delay_s": delay_s, "waiting_for": "approval" if hold else None,
        "needs_model": base.get("needs_model"),
        "details": Jsonb(details or {}), "payload": Jsonb(payload),
    })
    return execution_id


def check_plan_caps(plan: Plan, sandbox: SandboxSettings) -> None:
    """Every step's limits within the operator's caps: PolicyViolation naming step and field."""
    for step in plan.steps:
        check_limit_caps(step.limits.model_dump(), sandbox, prefix=f"steps[{step.id}].limits")
