"""Durable-run features on the real database and sandbox: approvals, retry, watchdog, schedules,
races, and rebuilding state from the event log."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import pytest

from onebox.agent.plan import Plan, parse_plan
from onebox.config import Settings
from onebox.errors import Conflict, ValidationError
from onebox.runtime.engine.queue import claim_steps
from onebox.runtime.engine.watchdog import flag_stale_runs
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services import schedules
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database


@pytest.fixture
async def rt(db: Database, settings: Settings) -> Runtime:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    settings.runtime.heartbeat_s = 0.2
    backend = get_backend(settings)
    yield Runtime(settings, db, backend)
    await backend.close()


def plan_of(*steps: dict) -> Plan:
    return parse_plan({"steps": list(steps)})


GATED = (
    {"id": "prepare", "tool": "bash", "code": "echo draft > draft.txt"},
    {"id": "gate", "kind": "approval", "input": {"prompt": "ship it?"}, "depends_on": ["prepare"]},
    {"id": "ship", "tool": "bash", "code": "cat draft.txt", "depends_on": ["gate"]},
)


async def wait_for_status(db: Database, run_id: uuid.UUID, status: str, timeout_s: float = 20) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if (await runs_api.get_run(db, run_id))["status"] == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run never reached {status}")


async def test_approval_waits_keeps_the_session_and_resumes(rt: Runtime) -> None:
    sub = await rt.submit(plan_of(*GATED))
    driving = asyncio.create_task(rt.drive(sub.run_id))
    await wait_for_status(rt.db, sub.run_id, "WAITING")
    events = [e["type"] for e in await runs_api.run_events(rt.db, sub.run_id)]
    assert "approval_requested" in events
    sessions = await rt.db.fetch("SELECT status FROM onebox.sessions WHERE run_id = %s", (sub.run_id,))
    assert [s["status"] for s in sessions] == ["ACTIVE"]
    assert rt.backend.workspace(f"run-{sub.run_id}").joinpath("draft.txt").exists()

    status = await runs_api.approve_step(rt.db, rt.settings, sub.run_id, "gate", approve=True,
                                         by="alice", comment="lgtm")
    assert status == "RUNNING"
    final = await asyncio.wait_for(driving, 30)
    assert final["status"] == "SUCCEEDED"
    steps = {s["step_id"]: s for s in await runs_api.run_steps(rt.db, sub.run_id)}
    assert steps["ship"]["stdout"] == "draft\n"
    assert steps["gate"]["status"] == "SUCCESS" and steps["gate"]["details"]["by"] == "alice"
    with pytest.raises(Conflict):
        await runs_api.approve_step(rt.db, rt.settings, sub.run_id, "gate", approve=True, by="bob")


async def test_rejection_fails_the_run_without_running_dependents(rt: Runtime) -> None:
    sub = await rt.submit(plan_of(*GATED))
    driving = asyncio.create_task(rt.drive(sub.run_id))
    await wait_for_status(rt.db, sub.run_id, "WAITING")
    assert await runs_api.approve_step(rt.db, rt.settings, sub.run_id, "gate", approve=False,
                                       by="bob", comment="not today") == "FAILED"
    final = await asyncio.wait_for(driving, 30)
    assert final["status"] == "FAILED" and "rejected by bob: not today" in final["error"]
    assert "ship" not in {s["step_id"] for s in await runs_api.run_steps(rt.db, sub.run_id)}
    released = await rt.db.fetch("SELECT status FROM onebox.sessions WHERE run_id = %s", (sub.run_id,))
    assert [s["status"] for s in released] == ["RELEASED"]


async def test_retry_a_dead_run_keeps_finished_steps(rt: Runtime) -> None:
    rt.settings.runtime.max_attempts = 1
    plan = plan_of({"id": "ok", "tool": "bash", "code": "echo once"},
                   {"id": "bad", "tool": "bash", "code": "exit 4", "depends_on": ["ok"]})
    first = await rt.run_plan(plan)
    assert first["status"] == "DEAD"
    with pytest.raises(Conflict):
        await runs_api.cancel_run(rt.db, first["id"])
    assert await runs_api.retry_run(rt.db, rt.settings, first["id"]) == ["bad"]
    again = await rt.drive(first["id"])
    assert again["status"] == "DEAD"
    steps = [(s["step_id"], s["attempt"]) for s in await runs_api.run_steps(rt.db, first["id"])]
    assert steps == [("ok", 1), ("bad", 1), ("bad", 2)]
    types = [e["type"] for e in await runs_api.run_events(rt.db, first["id"])]
    assert types.count("run_dead") == 2 and "run_retried" in types
    with pytest.raises(Conflict):
        await runs_api.retry_run(rt.db, rt.settings, (await rt.submit(plan)).run_id)


async def test_retry_restores_the_released_workspace_from_its_snapshot(rt: Runtime) -> None:
    rt.settings.runtime.max_attempts = 1
    plan = plan_of(
        {"id": "write", "tool": "bash", "code": "echo 42 > data.txt"},
        {"id": "flaky", "tool": "bash", "depends_on": ["write"],
         "code": "test -f marker || { touch marker; exit 1; }; cat data.txt"})
    dead = await rt.run_plan(plan)
    assert dead["status"] == "DEAD"
    workspace = rt.backend.workspace(f"run-{dead['id']}")
    assert not workspace.exists()  # released with the run
    await runs_api.retry_run(rt.db, rt.settings, dead["id"])
    final = await rt.drive(dead["id"])
    assert final["status"] == "SUCCEEDED", final["error"]
    steps = await runs_api.run_steps(rt.db, dead["id"])
    assert [(s["step_id"], s["attempt"], s["status"]) for s in steps] == [
        ("write", 1, "SUCCESS"), ("flaky", 1, "FAILED"), ("flaky", 2, "SUCCESS")]
    assert steps[-1]["stdout"] == "42\n"
    types = [e["type"] for e in await runs_api.run_events(rt.db, dead["id"])]
    assert "workspace_restored" in types


async def test_watchdog_flags_a_silent_run_once(rt: Runtime) -> None:
    sub = await rt.submit(plan_of({"id": "a", "tool": "bash", "code": "true"}))
    await rt.db.fetch("UPDATE onebox.agent_events SET created_at = now() - interval '2 hours' "
                      "WHERE run_id = %s RETURNING seq", (sub.run_id,))
    rt.settings.runtime.stale_after_s = 60
    assert await flag_stale_runs(rt.db, rt.settings) == 1
    assert await flag_stale_runs(rt.db, rt.settings) == 0
    stale = await runs_api.list_runs(rt.db, stale=True)
    assert [r["id"] for r in stale] == [sub.run_id]
    final = await rt.drive(sub.run_id)  # progress clears the flag
    assert final["status"] == "SUCCEEDED"
    assert await runs_api.list_runs(rt.db, stale=True) == []


async def test_schedule_slot_fires_exactly_once_with_racing_workers(rt: Runtime) -> None:
    plan = plan_of({"id": "tick", "tool": "bash", "code": "date +%s"})
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    row = await schedules.add_schedule(rt.db, "ticker", "* * * * *", plan, now=start)
    assert row["next_at"] <= dt.datetime.now(dt.UTC)
    fired = await asyncio.gather(*(schedules.fire_due(rt.db, rt.settings) for _ in range(4)))
    runs = [r for f in fired for r in f]
    assert len(runs) == 1
    listed = await schedules.list_schedules(rt.db)
    assert listed[0]["fired"] == 1 and listed[0]["next_at"] > dt.datetime.now(dt.UTC)
    assert await schedules.fire_due(rt.db, rt.settings) == []
    with pytest.raises(Conflict):
        await schedules.add_schedule(rt.db, "ticker", "* * * * *", plan)
    with pytest.raises(ValidationError) as bad:
        await schedules.add_schedule(rt.db, "bad", "every minute", plan)
    assert bad.value.field == "cron"


async def test_two_workers_race_for_one_step_and_exactly_one_wins(rt: Runtime) -> None:
    for _ in range(5):
        sub = await rt.submit(plan_of({"id": "only", "tool": "bash", "code": "true"}))
        claims = await asyncio.gather(*(claim_steps(rt.db, rt.settings, f"w{i}", 1,
                                                    run_id=sub.run_id) for i in range(2)))
        assert sorted(len(c) for c in claims) == [0, 1]


async def test_rebuild_from_events_equals_the_tables(rt: Runtime) -> None:
    from onebox.runtime.engine.rebuild import ATTEMPT_FIELDS, rebuild

    rt.settings.runtime.max_attempts = 2
    ok = await rt.run_plan(plan_of({"id": "a", "tool": "bash", "code": "echo a"},
                                   {"id": "b", "tool": "python", "code": "print(2)",
                                    "depends_on": ["a"]}))
    dead = await rt.run_plan(plan_of({"id": "x", "tool": "bash", "code": "exit 1"},
                                     {"id": "y", "tool": "bash", "code": "sleep 0.3"}))
    sub = await rt.submit(plan_of(*GATED))
    driving = asyncio.create_task(rt.drive(sub.run_id))
    await wait_for_status(rt.db, sub.run_id, "WAITING")
    waiting = await runs_api.get_run(rt.db, sub.run_id)
    await runs_api.approve_step(rt.db, rt.settings, sub.run_id, "gate", approve=True, by="t")
    await asyncio.wait_for(driving, 30)

    for run_id in (ok["id"], dead["id"], sub.run_id):
        run = await runs_api.get_run(rt.db, run_id)
        state = await rebuild(rt.db, run_id)
        assert (state.status, state.error) == (run["status"], run["error"])
        assert state.current_plan_id == str(run["current_plan_id"])
        rows = {str(r["id"]): r for r in await runs_api.run_steps(rt.db, run_id)}
        assert set(state.attempts) == set(rows)
        for execution_id, attempt in state.attempts.items():
            row = rows[execution_id]
            assert {k: attempt[k] for k in ATTEMPT_FIELDS} == {k: row[k] for k in ATTEMPT_FIELDS}
            assert attempt["input_hash"] == row["input_hash"]
    assert waiting["status"] == "WAITING"
