"""A whole run replayed, as a run of its own that workers execute.

    replay_id = await queue_replay(db, run_id, tenant_id)      # POST /v1/runs/{id}/replay
    report = await replay_report(db, replay_id, tenant_id)     # what it found, so far

:func:`queue_replay` records the replay as a new run (``request.replay`` names the
original): every code step that succeeded is queued again as an attempt whose
``details.replay_of`` names the attempt whose inputs it re-runs (a fork's inherited step
replays the attempt it was copied from); every other step keeps its recorded result
(``inherited_from``). No model is asked: code steps do not call one.

Workers claim those attempts like any other (the :class:`ReplaySteps` kind, an entry point
of ``onebox.step_kinds``): each re-executes its step from its own before-step snapshot
(:func:`onebox.snapshots.replay.replay`) in a sandbox of its own, holding one slot of the
tenant's session share while it runs (``sandbox.max_sessions_per_tenant``: at its share,
it waits for a slot), and archives what it printed with ``details.match``. Several steps of
one replay run at once on several workers. The attempt that finishes last ends the run:
SUCCEEDED when every re-executed step matched, else FAILED naming the first (in plan order)
that differs. An attempt whose worker was lost is queued again. Nothing runs on the API
server: it queues, and waits for the run as for any run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from onebox.config import Settings
from onebox.errors import Conflict, NotFound, TooManyRequests
from onebox.objects.base import ObjectStore
from onebox.runtime.engine import submit
from onebox.runtime.engine.archive import (
    archive_attempt,
    finish_run,
    outcome_from_result,
    output_hash,
)
from onebox.runtime.engine.kinds import Performed, Worker
from onebox.runtime.services import run_compare, session_service, tenant_sessions
from onebox.runtime.services.run_compare import CODE_TOOLS, MAX_TEXT_DIFF_CHARS
from onebox.sandbox.base import SandboxBackend
from onebox.snapshots.replay import ReplayReport, new_session_id, replay
from onebox.store import runs as store
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

log = logging.getLogger(__name__)
Q = load_queries("run_compare")
FORKS = load_queries("forks")
SLOT_WAIT_S = 600.0  # an attempt waits this long for a slot of its tenant's session share
NOT_REPLAYED = "not a finished code step: its recorded result stands"


async def queue_replay(db: Database, run_id: uuid.UUID, tenant_id: str) -> uuid.UUID:
    """The replay of a finished run, queued as a run of its own; its id (see the module)."""
    run = await run_compare.tenant_run(db, run_id, tenant_id, "run_id")
    if run["status"] not in store.TERMINAL_RUN_STATES:
        raise Conflict(f"run {run_id} is {run['status']}: replay a run once it has ended",
                       field="run_id")
    attempts = await run_compare.latest_attempts(db, run_id)
    async with db.transaction() as conn:
        made = await submit.insert_run(
            conn, run["source"], {"replay": {"run_id": str(run_id)}},
            name=f"replay of {run.get('name') or run_id}", idempotency_key=None,
            tenant_id=tenant_id, profile=run.get("profile"))
        plan_ids = await submit.copy_plan_versions(conn, run_id, made)
        base = {"run_id": made.run_id, "session_id": submit.session_id_for(made.run_id),
                "trace_id": made.trace_id}
        queued = 0
        for row in attempts:
            ids = {**base, "id": uuid.uuid4(), "plan_id": plan_ids.get(row["plan_id"])}
            details = row["details"] or {}
            if row["tool_name"] in CODE_TOOLS and row["status"] == "SUCCESS":
                await conn.execute(Q["queue_replay_attempt"], {
                    **ids, "row": row["id"], "attempt": 1, "max_attempts": 1,
                    "original": details.get("inherited_from") or str(row["id"]),
                    "original_run": details.get("inherited_from_run") or str(run_id)})
                queued += 1
            else:
                await conn.execute(FORKS["inherit_attempt"], {
                    **ids, "step_number": row["step_number"], "parent_id": row["id"],
                    "parent_run": run_id})
        if queued == 0:
            made_row = await store.fetch_one(conn, "lock_run", {"run_id": made.run_id})
            assert made_row is not None
            await finish_replay(conn, made_row)
    return made.run_id


async def replay_report(db: Database, replay_id: uuid.UUID, tenant_id: str) -> dict[str, Any]:
    """What a replay run found (so far, while it runs): per step, whether it was re-executed
    and matched; the first step that differs with its output and file diff."""
    run = await run_compare.tenant_run(db, replay_id, tenant_id, "replay_run_id")
    async with db.connection() as conn:
        report = await _report(conn, run)
    return report


async def _report(conn: store.Conn, run: Row) -> dict[str, Any]:
    rows = await (await conn.execute(Q["replay_report_rows"], {"run_id": run["id"]})).fetchall()
    steps, first = [], None
    for row in sorted(rows, key=lambda r: (r["step_number"], r["step_id"])):
        details = row["details"] or {}
        if "replay_of" not in details:
            steps.append({"step_id": row["step_id"], "replayed": False,
                          "execution_id": details.get("inherited_from"), "why": NOT_REPLAYED})
            continue
        done = row["status"] not in ("PENDING", "RUNNING")
        match = bool(details.get("match")) if done else None
        steps.append({"step_id": row["step_id"], "replayed": True, "status": row["status"],
                      "execution_id": details["replay_of"], "match": match,
                      "pre_source": details.get("pre_source"),
                      "output_hash": {"recorded": details.get("recorded_output_hash"),
                                      "replayed": row["output_hash"]}})
        if done and not match and first is None:
            first = details.get("difference") or {
                "step_id": row["step_id"], "execution_id": details["replay_of"],
                "stdout_diff": "", "stderr_diff": "", "cut": False, "files": {},
                "error": row["error"]}
    replayed = [s for s in steps if s["replayed"]]
    return {"run_id": (run["request"] or {}).get("replay", {}).get("run_id"),
            "replay_run_id": str(run["id"]), "status": run["status"], "steps": steps,
            "replayed": len(replayed), "matches": sum(1 for s in replayed if s["match"]),
            "model_calls": 0, "first_difference": first}


async def finish_replay(conn: store.Conn, run: Row) -> str | None:
    """End the replay run once none of its attempts is left to run (inside the archive's
    transaction, the run row locked): its terminal state, or None while some still run."""
    left = await (await conn.execute(Q["replay_rows_left"], {"run_id": run["id"]})).fetchone()
    if left is not None and left["n"] > 0:
        return None
    report = await _report(conn, run)
    first = report["first_difference"]
    of_run = report["run_id"]
    summary = {"replayed": report["replayed"], "matches": report["matches"],
               "first_difference": first["step_id"] if first else None}
    await store.append_event(conn, run["id"], "run_replay", {"of_run_id": of_run, **summary},
                             trace_id=run["trace_id"])
    original = await store.fetch_one(conn, "get_run", {"run_id": uuid.UUID(of_run)})
    if original is not None:
        await store.append_event(conn, original["id"], "run_replayed", {
            "replay_run_id": str(run["id"]), **summary}, trace_id=original["trace_id"])
    status = "SUCCEEDED" if first is None else "FAILED"
    error = None if first is None else (
        f"step {first['step_id']} differs from run {of_run} "
        f"({report['matches']} of {report['replayed']} replayed steps match)")
    await finish_run(conn, run, status, error)
    return status


def ended(report: dict[str, Any]) -> bool:
    """Whether the replay run a report describes has ended."""
    return report["status"] in store.TERMINAL_RUN_STATES


async def wait_for_replay(db: Database, replay_id: uuid.UUID, tenant_id: str,
                          wait_s: float) -> dict[str, Any]:
    """The replay's report once its run has ended, or as it stands after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        report = await replay_report(db, replay_id, tenant_id)
        if ended(report) or time.monotonic() >= deadline:
            return report
        await asyncio.sleep(0.2)


async def replay_here(db: Database, backend: SandboxBackend, objects: ObjectStore,
                      settings: Settings, run_id: uuid.UUID, tenant_id: str, *,
                      on_step: Callable[[dict[str, Any]], None] | None = None,
                      ) -> dict[str, Any]:
    """Queue the run's replay and work it in this process (`onebox replay RUN`, no server):
    a worker here serves that run only, beside any other worker of the database; ``on_step``
    hears of each step once it is done. Returns the report once the replay run has ended."""
    from onebox.runtime.engine.worker import Worker  # the worker loads this module (a kind)

    replay_id = await queue_replay(db, run_id, tenant_id)
    worker = Worker(db, backend, settings, run_id=replay_id, objects=objects)
    told: set[str] = set()
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))
    try:
        while True:
            report = await replay_report(db, replay_id, tenant_id)
            for step in report["steps"]:
                if on_step is not None and step["step_id"] not in told \
                        and (not step["replayed"] or step["match"] is not None):
                    told.add(step["step_id"])
                    on_step(step)
            if ended(report):
                return report
            if serving.done():
                serving.result()  # the worker's failure, if it failed
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await serving


@contextlib.asynccontextmanager
async def session_slot(db: Database, backend: SandboxBackend, tenant_id: str, *,
                       wait_s: float = SLOT_WAIT_S) -> AsyncIterator[None]:
    """One of the tenant's live-session slots (``sandbox.max_sessions_per_tenant``) for as
    long as a replayed step's sandbox runs: at its share, wait for one (the step is queued
    work, like a run's, never refused), up to ``wait_s``. The slot is owned by this process:
    if it dies meanwhile, the next sweep on its sandbox dir releases it."""
    slot, deadline = new_session_id("replay"), time.monotonic() + wait_s
    while True:
        try:
            await tenant_sessions.insert_session(db, slot, backend.name, tenant_id,
                                                 session_service.session_share(backend),
                                                 owner=backend.local_owner())
            break
        except TooManyRequests:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)
    try:
        yield
    finally:
        await tenant_sessions.release_session(db, slot, tenant_id)


def _difference(step_id: str, execution: str, report: ReplayReport) -> dict[str, Any]:
    """The step's output diff (bounded) and its files, for the report's first difference."""
    return {"step_id": step_id, "execution_id": execution,
            "stdout_diff": report.stdout_diff[:MAX_TEXT_DIFF_CHARS],
            "stderr_diff": report.stderr_diff[:MAX_TEXT_DIFF_CHARS],
            "cut": max(len(report.stdout_diff), len(report.stderr_diff)) > MAX_TEXT_DIFF_CHARS,
            "files": report.files.to_json()}


class ReplaySteps:
    """The step kind of a replay's re-executed attempts (see the module)."""

    name = "replay"
    priority = 30  # before the agent's kind: a replayed agent step's row is a replay's
    interruptible = True  # a cancelled replay stops waiting for its slot or its sandbox

    def handles(self, row: Row) -> bool:
        details = row.get("details") or {}
        return isinstance(details, dict) and "replay_of" in details

    async def perform(self, worker: Worker, row: Row) -> Performed:
        objects = _objects(worker)
        original = str(row["details"]["replay_of"])
        async with worker.db.connection() as conn:
            run = await store.fetch_one(conn, "get_run", {"run_id": row["run_id"]})
        assert run is not None
        async with session_slot(worker.db, worker.backend, run["tenant_id"]):
            report = await replay(worker.db, worker.backend, objects, uuid.UUID(original),
                                  hash_output=output_hash)
        kept = {k: v for k, v in (row["details"] or {}).items() if k != "files_written"}
        outcome = outcome_from_result(report.result, kept)
        details = {**outcome.details, "match": report.match, "pre_source": report.pre_source,
                   "recorded_output_hash": report.recorded_output_hash}
        if not report.match:
            details["difference"] = _difference(row["step_id"], original, report)
        return Performed(report, replace(outcome, details=details))

    async def archive(self, worker: Worker, row: Row, performed: Performed) -> str | None:
        details = performed.outcome.details
        if "match" not in details:  # it failed around the replay (no snapshot, a sandbox)
            performed = Performed(None, replace(performed.outcome, details={
                **(row["details"] or {}), **details, "match": False}))

        async def then(conn: store.Conn, run: Row, done: Row) -> str | None:
            await store.append_event(conn, run["id"], "step_replayed", {
                "step_id": done["step_id"], "execution_id": str(done["id"]),
                "from_execution_id": row["details"]["replay_of"],
                "match": bool(performed.outcome.details.get("match"))},
                trace_id=run["trace_id"], execution_id=done["id"])
            return await finish_replay(conn, run)

        return await archive_attempt(worker.db, row, performed.outcome, then)

    async def lost(self, conn: store.Conn, settings: Settings, run: Row, row: Row) -> None:
        """Its worker was lost: queue it again while it has attempts left, else end the run."""
        if row["attempt"] < row["max_attempts"]:
            details = row["details"] or {}
            await conn.execute(Q["queue_replay_attempt"], {
                "id": uuid.uuid4(), "run_id": row["run_id"], "plan_id": row["plan_id"],
                "session_id": row["session_id"], "trace_id": row["trace_id"],
                "row": row["id"], "attempt": row["attempt"] + 1,
                "max_attempts": row["max_attempts"], "original": details["replay_of"],
                "original_run": details.get("replay_of_run")})
            return
        await finish_run(conn, run, "FAILED", f"the replay of step {row['step_id']} lost "
                         f"its worker {row['attempt']} time(s)")

    def continues(self, run: Row) -> bool:
        return False

    async def after_answer(self, conn: store.Conn, run: Row) -> None:
        return None


def _objects(worker: Worker) -> ObjectStore:
    workspaces = worker.runner.workspaces
    if workspaces is None:
        raise NotFound("this worker has no object store, so it cannot read the snapshots a "
                       "replay starts from: start it with the runtime's objects",
                       field="objects")
    return workspaces.objects


REPLAY = ReplaySteps()
