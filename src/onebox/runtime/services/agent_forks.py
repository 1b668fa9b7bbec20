"""Forking a run the agent schedules (a task, or a plan beyond the plan index) at a step.

An agent run is a reducer over its log (:mod:`onebox.runtime.agent.engine`): the agent
is rebuilt from the actions it stored and the observations it got. A fork at STEP copies
the parent's log up to the last observation before the agent first acted on STEP (wrote
its code, ran it, asked for its approval), with the plan versions recorded by then. The
fork's agent is therefore exactly the parent's at that moment: every model answer, lookup
and step result observed before it is kept (their attempts copied and marked
``inherited_from``, never performed or asked again), and what the agent does next (STEP
and anything issued with it or still outstanding) is queued in the fork. With another
profile, every model call from STEP on goes to that profile's model.

A step that finished after the agent first acted on STEP (a parallel branch) did not
finish before it, so the fork runs it again. The workspace starts as the parent's was just
before STEP's first execution (its 'pre' snapshot).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from onebox.config import Settings
from onebox.errors import Conflict, ValidationError
from onebox.runtime.agent import engine as agent_engine
from onebox.runtime.engine import run_files, submit
from onebox.runtime.engine.run_files import RunFile
from onebox.runtime.models.profiles import run_profile
from onebox.store import runs as store
from onebox.store import snapshots as snapshot_rows
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("forks")
ENDED_ATTEMPT = frozenset({"SUCCESS", "FAILED", "TIMEOUT", "CANCELLED", "SKIPPED"})
OWN_REQUEST_KEYS = ("session_id", "thread")  # a thread turn's fork is a run of its own


@dataclass(frozen=True)
class AgentCut:
    """Where a fork of an agent run starts: the parent's log entries it keeps, and the
    attempts whose observations those entries hold."""

    upto_seq: int
    inherited: list[Row]
    plan_version: int
    pre_snapshot_id: uuid.UUID | None
    step_ran_first: bool


def _acts_on(payload: dict[str, Any], at: str) -> bool:
    return at in (payload.get("instance"), payload.get("step_id"))


async def find_cut(db: Database, parent: Row, at: str) -> AgentCut:
    """The point of the parent's log just before the agent first acted on ``at``."""
    async with db.connection() as conn:
        log = await store.fetch_all(conn, "agent_log", {"run_id": parent["id"], "from_seq": 0})
        cur = await conn.execute(Q["agent_attempts"], {"run_id": parent["id"]})
        attempts = list(await cur.fetchall())
    first = next((r for r in log if r["type"] == "agent_action" and _acts_on(r["payload"], at)),
                 None)
    if first is None:
        named = sorted({str(r["payload"].get("instance") or r["payload"].get("step_id"))
                        for r in log if r["type"] == "agent_action"
                        and (r["payload"].get("instance") or r["payload"].get("step_id"))})
        raise ValidationError(f"the agent never acted on step {at!r} in run {parent['id']}; "
                              f"the steps it acted on: {', '.join(named) or 'none'}",
                              field="at")
    upto = max((r["seq"] for r in log if r["type"] == "agent_observation"
                and r["seq"] < first["seq"]), default=0)
    observed = {r["payload"]["action_id"] for r in log
                if r["type"] == "agent_observation" and r["seq"] <= upto}
    last: dict[str, Row] = {}
    for row in attempts:  # ordered by attempt: the last one is the one observed
        if row["action_id"] in observed and row["status"] in ENDED_ATTEMPT:
            last[row["action_id"]] = row
    versions = [int(r["payload"]["version"]) for r in log if r["seq"] <= upto
                and r["type"] == "agent_action" and r["payload"].get("version") is not None]
    ran = [r for r in attempts if r["step_id"] == at and r["pre_snapshot_id"] is not None]
    executed_before = any(r["tool_name"] not in agent_engine.WORK_TOOLS.values()
                          for r in last.values())
    return AgentCut(upto, sorted(last.values(), key=lambda r: (r["step_number"], r["step_id"])),
                    max(versions, default=0), ran[0]["pre_snapshot_id"] if ran else None,
                    not executed_before)


async def fork_agent_run(
    db: Database, settings: Settings, parent: Row, tenant_id: str, *, at: str,
    profile: str | None,
) -> tuple[submit.Submitted, list[str], uuid.UUID | None, uuid.UUID | None]:
    """The fork of an agent run (see the module): its run, the step ids it inherited, the
    fork session's head snapshot and the parent's snapshot it names."""
    cut = await find_cut(db, parent, at)
    if cut.pre_snapshot_id is None and not cut.step_ran_first:
        raise Conflict(f"step {at!r} of run {parent['id']} has no snapshot of the workspace "
                       "before it (removed by retention, or never executed): there is nothing "
                       "to start the fork from", field="at")
    request = {k: v for k, v in parent["request"].items() if k not in OWN_REQUEST_KEYS}
    request["fork"] = {"run_id": str(parent["id"]), "at": at}
    if profile is not None:
        request["profile"] = request["fork"]["profile"] = profile
    inputs = [RunFile(f["path"], f["sha256"], f["size_bytes"])
              for f in await run_files.listed(db, parent["id"], "input")]
    async with db.transaction() as conn:
        kept = (await run_profile(conn, settings, tenant_id, profile) if profile is not None
                else parent["profile"])
        made = await submit.insert_run(conn, parent["source"], request, name=parent["name"],
                                       idempotency_key=None, tenant_id=tenant_id,
                                       profile=kept, inputs=inputs)
        plan_ids = await submit.copy_plan_versions(conn, parent["id"], made, cut.plan_version)
        await _copy_log(conn, parent["id"], made, cut.upto_seq)
        session_id = submit.session_id_for(made.run_id)
        for row in cut.inherited:
            await conn.execute(Q["inherit_attempt"], {
                "id": uuid.uuid4(), "run_id": made.run_id,
                "plan_id": plan_ids.get(row["plan_id"]), "session_id": session_id,
                "trace_id": made.trace_id, "step_number": row["step_number"],
                "parent_id": row["id"], "parent_run": parent["id"]})
        head = (None if cut.pre_snapshot_id is None
                else await snapshot_rows.copy_as_head(conn, session_id, cut.pre_snapshot_id))
        inherited = [r["step_id"] for r in cut.inherited]
        await store.append_event(conn, made.run_id, "run_forked", {
            "from_run_id": str(parent["id"]), "at": at, "inherited": inherited,
            "profile": profile, "workspace_snapshot": head and str(head),
            "from_snapshot": cut.pre_snapshot_id and str(cut.pre_snapshot_id)},
            trace_id=made.trace_id)
        run = await store.fetch_one(conn, "get_run", {"run_id": made.run_id})
        assert run is not None
        await agent_engine.take_over(conn, run)
    return made, inherited, head, cut.pre_snapshot_id


async def _copy_log(conn: Any, parent_id: uuid.UUID, made: submit.Submitted,
                    upto_seq: int) -> None:
    """The parent's agent log (and what it said about intent and skipped steps) up to
    ``upto_seq``, in order, as the fork's."""
    cur = await conn.execute(Q["agent_log_upto"], {"run_id": parent_id, "upto": upto_seq})
    for row in await cur.fetchall():
        await store.append_event(conn, made.run_id, row["type"], row["payload"],
                                 trace_id=made.trace_id)
