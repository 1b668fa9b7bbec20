"""A 10,000-step plan: submitted in short transactions, read back a page at a time, and the
worker's plan cache stays bounded.

Short transactions are checked by structure, not time: rows written by one transaction
share its ``xmin``, so the rows per ``xmin`` are the rows one transaction held.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from onebox.agent.plan import Plan, parse_plan
from onebox.config import Settings
from onebox.errors import ValidationError
from onebox.runtime.engine import plans, submit
from onebox.runtime.engine.submit import BATCH_STEPS, queue_missing_steps
from onebox.runtime.engine.watchdog import flag_stale_runs
from onebox.runtime.services.runs import run_timeline
from onebox.runtime.services.submission import submit_plan
from onebox.store.db import Database

N_STEPS = 10_000


def fan(n: int) -> Plan:
    return parse_plan({"steps": [{"id": f"w{i}", "tool": "bash", "code": "true"}
                                 for i in range(n)]})


async def rows_per_transaction(db: Database, table: str, run_id: uuid.UUID) -> dict[str, int]:
    rows = await db.fetch(f"SELECT xmin::text AS tx, count(*) AS n FROM onebox.{table} "
                          "WHERE run_id = %(run_id)s GROUP BY 1", {"run_id": run_id})
    return {r["tx"]: int(r["n"]) for r in rows}


async def test_a_wide_plan_is_queued_in_bounded_transactions(
    db: Database, settings: Settings
) -> None:
    submitted = await submit_plan(db, settings, fan(N_STEPS))
    steps = await rows_per_transaction(db, "task_execution", submitted.run_id)
    events = await rows_per_transaction(db, "agent_events", submitted.run_id)
    assert sum(steps.values()) == N_STEPS
    assert max(steps.values()) <= BATCH_STEPS, "one transaction held too many steps"
    assert max(events.values()) <= BATCH_STEPS + 2  # + run_submitted and plan_created
    run = await db.fetchone("SELECT xmin::text AS tx FROM onebox.runs WHERE id = %(id)s",
                            {"id": submitted.run_id})
    assert run is not None and steps.get(run["tx"]) == BATCH_STEPS, \
        "the run and its first queued steps commit together"


async def test_step_events_are_in_step_order(db: Database, settings: Settings) -> None:
    submitted = await submit_plan(db, settings, fan(1_200))
    rows = await db.fetch("SELECT (payload->>'step_number')::int AS n FROM onebox.agent_events"
                          " WHERE run_id = %(id)s AND type = 'step_queued' ORDER BY seq",
                          {"id": submitted.run_id})
    numbers = [r["n"] for r in rows]
    assert numbers == sorted(numbers) and len(numbers) == 1_200


async def test_a_submitter_lost_between_batches_is_repaired(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, calls = submit.queue_steps, []

    async def die_after_first(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) > 1:
            raise ConnectionError("the submitter died")
        await real(*args, **kwargs)

    monkeypatch.setattr(submit, "queue_steps", die_after_first)
    with pytest.raises(ConnectionError):
        await submit_plan(db, settings, fan(1_200))
    monkeypatch.setattr(submit, "queue_steps", real)
    run = await db.fetchone("SELECT id FROM onebox.runs", {})
    assert run is not None
    assert await count_steps(db, run["id"]) == BATCH_STEPS
    settings.runtime.stale_after_s = 0  # the watchdog finds the run silent and repairs it
    assert await flag_stale_runs(db, settings) == 1
    assert await count_steps(db, run["id"]) == 1_200
    assert await queue_missing_steps(db, settings, run["id"]) == 0


async def count_steps(db: Database, run_id: uuid.UUID) -> int:
    row = await db.fetchone("SELECT count(*) AS n FROM onebox.task_execution "
                            "WHERE run_id = %(id)s", {"id": run_id})
    assert row is not None
    return int(row["n"])


async def test_show_pages_through_a_big_run(db: Database, settings: Settings) -> None:
    submitted = await submit_plan(db, settings, fan(N_STEPS))
    first = await run_timeline(db, submitted.run_id)
    assert first["summary"]["steps"] == {"PENDING": N_STEPS}
    assert first["summary"]["attempts"] == N_STEPS and first["summary"]["failed"] == []
    assert [s["step_id"] for s in first["steps"]] == [f"w{i}" for i in range(100)]
    seen, after = [], None
    while True:
        page = await run_timeline(db, submitted.run_id, limit=3_000, after=after)
        seen += [s["id"] for s in page["steps"]]
        after = page["next"]
        if after is None:
            break
    assert len(seen) == len(set(seen)) == N_STEPS
    assert len((await run_timeline(db, submitted.run_id, limit=None))["steps"]) == N_STEPS


async def test_summary_names_the_failed_steps(db: Database, settings: Settings) -> None:
    submitted = await submit_plan(db, settings, fan(3))
    async with db.transaction() as conn:
        await conn.execute("UPDATE onebox.task_execution SET status = 'FAILED', error = 'boom' "
                           "WHERE run_id = %(id)s AND step_id = 'w1'", {"id": submitted.run_id})
    summary = (await run_timeline(db, submitted.run_id))["summary"]
    assert summary["steps"] == {"FAILED": 1, "PENDING": 2}
    assert [(f["step_id"], f["error"]) for f in summary["failed"]] == [("w1", "boom")]


async def test_a_bad_cursor_names_the_field(db: Database, settings: Settings) -> None:
    submitted = await submit_plan(db, settings, fan(2))
    with pytest.raises(ValidationError) as err:
        await run_timeline(db, submitted.run_id, after="12;drop")
    assert err.value.field == "after"


async def test_the_plan_cache_is_bounded(db: Database, settings: Settings) -> None:
    plans._plans.clear()
    plan_ids = [(await submit_plan(db, settings, fan(2))).run_id
                for _ in range(plans.PLAN_CACHE_MAX + 10)]
    async with db.connection() as conn:
        for run_id in plan_ids:
            row = await db.fetchone("SELECT current_plan_id FROM onebox.runs WHERE id = %(id)s",
                                    {"id": run_id})
            assert row is not None
            await plans.load_plan_index(conn, row["current_plan_id"])
    assert len(plans._plans) == plans.PLAN_CACHE_MAX


async def test_the_sandbox_keeps_no_entry_per_finished_session(settings: Settings) -> None:
    """The linux backend's running-process index has one entry per *live* execution: after
    200 sessions that ran and were removed, it is empty (it had 200 entries before)."""
    from onebox.sandbox.base import ExecRequest
    from onebox.sandbox.linux import BwrapSandbox
    from onebox.sandbox.registry import get_backend

    backend = get_backend(settings)
    assert isinstance(backend, BwrapSandbox)
    try:
        for i in range(200):
            result = await backend.execute(ExecRequest(session_id=f"big-{i}", code="pass"))
            assert result.exit_code == 0, result.stderr
            await backend.cleanup(f"big-{i}")
        assert backend._running == {}
    finally:
        await backend.close()
