"""Forking a run at a step: go back to a step, change something, and go on from there.

    fork = await fork_run(db, settings, run_id, "default", at="s3",
                          changes={"s3.input.n": 5})

The fork is a new run of the (changed) plan. Every step of the parent that finished before
``at`` is kept as finished: its attempt is copied with its output, result and hashes,
marked ``inherited_from`` (a ``step_inherited`` event), and never executed again. A step
is inherited when it succeeded in the parent, is not ``at`` nor downstream of it, is the
same in both plans, and every step it depends on is inherited too. The fork's workspace
starts as the parent's was just before ``at`` ran: its session's head is the parent's
'pre' snapshot of ``at`` (the same stored objects; nothing is copied), which the first step
restores on whatever host runs it. From ``at`` on, steps run as in any run.

The fork's request records its parent (``request.fork``: run id and step), which ``show``
and ``explain`` print. A run the agent schedules (a task, goals, conditions, loops) is
forked from its log instead, optionally with another profile whose model calls then start
at ``at`` (:mod:`onebox.runtime.services.agent_forks`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from onebox.agent.plan import Plan, parse_plan
from onebox.config import Settings
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.runtime.agent import engine as agent_engine
from onebox.runtime.engine import run_files, submit
from onebox.runtime.engine.run_files import RunFile
from onebox.runtime.engine.schedule import StepState
from onebox.runtime.engine.step_context import check_plan_tools
from onebox.runtime.services.agent_forks import fork_agent_run
from onebox.snapshots.history import compose
from onebox.store import runs as store
from onebox.store import snapshots as snapshot_rows
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("forks")


@dataclass(frozen=True)
class Forked:
    run_id: uuid.UUID
    trace_id: str
    inherited: tuple[str, ...]
    rerun: tuple[str, ...]
    workspace_snapshot: uuid.UUID | None  # None: the step ran first; inputs only


def apply_changes(spec: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """The plan with ``STEP.FIELD=VALUE`` changes: ``s3.code``, ``s3.input.n``,
    ``s3.limits.timeout_s``... A step or field path that does not exist in a step is made
    (the plan's own validation then says whether it is allowed)."""
    out = json.loads(json.dumps(spec))
    steps = {str(s.get("id")): s for s in out.get("steps", []) if isinstance(s, dict)}
    for target, value in changes.items():
        step_id, _, path = str(target).partition(".")
        if step_id not in steps or not path:
            raise ValidationError(f"set {target!r}: name a step of the plan and a field, as "
                                  "STEP.FIELD (s3.code, s3.input.n)", field="set")
        node = steps[step_id]
        *parents, last = path.split(".")
        for part in parents:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ValidationError(f"set {target!r}: {part!r} of step {step_id!r} is not an "
                                      "object", field="set")
            node = child
        node[last] = value
    return out


def _descendants(plan: Plan, at: str) -> set[str]:
    below: dict[str, list[str]] = {}
    for step in plan.steps:
        for dep in step.depends_on:
            below.setdefault(dep, []).append(step.id)
    found, todo = set(), [at]
    while todo:
        for child in below.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _inherited(parent: Plan, child: Plan, at: str, attempts: Mapping[str, Row]) -> list[str]:
    """The steps of ``child`` kept from the parent, in plan order (see the module)."""
    same = {s.id: s.model_dump(mode="json") for s in parent.steps}
    downstream = _descendants(child, at) | {at}
    kept: list[str] = []
    for step in child.steps:  # plan order: dependencies first
        row = attempts.get(step.id)
        if (step.id not in downstream and row is not None and row["status"] == "SUCCESS"
                and same.get(step.id) == step.model_dump(mode="json")
                and all(d in kept for d in step.depends_on)):
            kept.append(step.id)
    return kept


async def fork_run(
    db: Database, settings: Settings, run_id: uuid.UUID, tenant_id: str, *, at: str,
    plan: dict[str, Any] | None = None, changes: Mapping[str, Any] | None = None,
    profile: str | None = None,
) -> Forked:
    """A new run of the parent's plan (or ``plan``), with ``changes``, going on from ``at``."""
    async with db.connection() as conn:
        parent = await store.fetch_one(conn, "get_run", {"run_id": run_id})
    if parent is None or parent.get("tenant_id") != tenant_id:
        raise NotFound(f"run {run_id} does not exist", field="run_id")
    if parent["status"] not in store.TERMINAL_RUN_STATES:
        raise Conflict(f"run {run_id} is {parent['status']}: fork a run once it has ended "
                       "(cancel it first to fork it now)", field="run_id")
    if agent_engine.is_agent_run(parent):
        if plan is not None or changes:
            raise ValidationError(f"run {run_id} is scheduled by the agent: fork it with "
                                  "another profile (its model calls then start at the step); "
                                  "a changed plan or step is for runs of code steps",
                                  field="set" if changes else "plan")
        made, kept, head, _ = await fork_agent_run(db, settings, parent, tenant_id, at=at,
                                                   profile=profile)
        return Forked(made.run_id, made.trace_id, tuple(kept), (), head)
    if profile is not None:
        raise ValidationError(f"run {run_id} is a plan of code steps, which calls no model: "
                              "a profile changes nothing (change a step with --set, or the "
                              "plan with --plan)", field="profile")
    if parent["current_plan_id"] is None:
        raise Conflict(f"run {run_id} has no plan to fork", field="run_id")
    async with db.connection() as conn:
        stored = await store.fetch_one(conn, "plan_by_id", {"plan_id": parent["current_plan_id"]})
        cur = await conn.execute(Q["parent_attempts"], {"run_id": run_id})
        attempts = {r["step_id"]: r for r in await cur.fetchall()}
    assert stored is not None, "a plan run has its plan"
    parent_plan = parse_plan(stored["spec"])
    spec = plan if plan is not None else parent_plan.to_data()
    child = parse_plan(apply_changes(spec, changes or {}))
    submit.check_plan_caps(child, settings.sandbox)  # the operator's caps bind a fork too
    async with db.connection() as conn:
        await check_plan_tools(conn, child)
    if not submit.on_plan_index(child):
        raise ValidationError("the fork's plan needs the agent (a goal, tool, condition or "
                              "loop): fork with a plan of code steps and approvals",
                              field="plan")
    if at not in {s.id for s in child.steps}:
        raise ValidationError(f"step {at!r} is not in the fork's plan", field="at")
    ran = attempts.get(at)
    if ran is None:
        raise ValidationError(f"step {at!r} never ran in run {run_id}: fork at a step that "
                              "ran (its workspace before it is what the fork starts from)",
                              field="at")
    root = not next(s for s in parent_plan.steps if s.id == at).depends_on \
        if at in {s.id for s in parent_plan.steps} else False
    if ran["pre_snapshot_id"] is None and not root:
        raise Conflict(f"step {at!r} of run {run_id} has no snapshot of the workspace before "
                       "it (removed by retention, or snapshot_policy was not 'always'): there "
                       "is nothing to start the fork from", field="at")
    inherited = _inherited(parent_plan, child, at, attempts)
    return await _store_fork(db, settings, parent, child, at, attempts, inherited,
                             ran["pre_snapshot_id"], tenant_id)


async def _store_fork(
    db: Database, settings: Settings, parent: Row, child: Plan, at: str,
    attempts: Mapping[str, Row], inherited: list[str], pre_id: uuid.UUID | None,
    tenant_id: str,
) -> Forked:
    prep = submit.prepare_plan(child, child.name or parent.get("name"))
    request = {"plan_version": 1, "spec_hash": prep.spec_hash,
               "fork": {"run_id": str(parent["id"]), "at": at}}
    inputs = [RunFile(f["path"], f["sha256"], f["size_bytes"])
              for f in await run_files.listed(db, parent["id"], "input")]
    async with db.transaction() as conn:
        made = await submit.insert_run(conn, "plan", request, name=prep.name,
                                       idempotency_key=None, tenant_id=tenant_id,
                                       inputs=inputs)
        plan_id = await submit.create_plan_version(
            conn, made.run_id, made.trace_id, child, version=1,
            reason=f"forked from run {parent['id']} at step {at}",
            spec=(prep.spec_json, prep.spec_hash))
        session_id = submit.session_id_for(made.run_id)
        history = await _has_history(conn, attempts, inherited)
        states: dict[str, StepState] = {}
        for step_id in inherited:
            row, new_id = attempts[step_id], uuid.uuid4()
            params = {"id": new_id, "run_id": made.run_id, "session_id": session_id,
                      "step_number": prep.index.numbers[step_id], "parent_id": row["id"]}
            await conn.execute(Q["inherit_attempt"], {
                **params, "plan_id": plan_id, "trace_id": made.trace_id,
                "parent_run": parent["id"]})
            if history:
                changes = compose(await snapshot_rows.step_changes(conn, parent["id"], step_id))
                await conn.execute(Q["inherit_changes"], {
                    **params, "step_id": step_id, "position": prep.index.numbers[step_id],
                    "changes": Jsonb(changes), "paths": len(changes)})
            states[step_id] = StepState("SUCCESS", 1, row["output_hash"])
        await conn.execute(Q["set_steps_left"], {
            "run_id": made.run_id, "steps_left": len(child.steps) - len(inherited)})
        if history:  # the parent's base, and the kept steps' change sets on it
            base = await snapshot_rows.run_base(conn, submit.run_session_id(parent), parent["id"])
            pre_id = None if base is None else base["id"]
        head = None if pre_id is None else await snapshot_rows.copy_as_head(conn, session_id, pre_id)
        await store.append_event(conn, made.run_id, "run_forked", {
            "from_run_id": str(parent["id"]), "at": at, "inherited": inherited,
            "workspace_snapshot": head and str(head),
            "from_snapshot": pre_id and str(pre_id)}, trace_id=made.trace_id)
        await submit.queue_ready_steps(
            conn, settings, made.run_id, made.trace_id, plan_id, prep.index, states)
    rerun = tuple(s.id for s in child.steps if s.id not in inherited)
    return Forked(made.run_id, made.trace_id, tuple(inherited), rerun, head)


async def _has_history(conn: store.Conn, attempts: Mapping[str, Row],
                       inherited: list[str]) -> bool:
    """Whether every kept attempt has a change set: the fork then starts from the parent's
    base plus those (parallel siblings of ``at`` included); else (a run recorded before
    change sets) from the parent's 'pre' snapshot of ``at``."""
    ids = [attempts[s]["id"] for s in inherited]
    if not ids:
        return True
    found = await (await conn.execute(Q["recorded_changes"], {"ids": ids})).fetchone()
    return found is not None and int(found["n"]) == len(ids)


def fork_json(forked: Forked) -> dict[str, Any]:
    return {"run_id": str(forked.run_id), "trace_id": forked.trace_id,
            "inherited": list(forked.inherited), "rerun": list(forked.rerun),
            "workspace_snapshot": forked.workspace_snapshot and str(forked.workspace_snapshot)}

