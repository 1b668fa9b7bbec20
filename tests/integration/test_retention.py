"""Retention on the real database, sandbox and object store: runs past their age or count
go whole (events, attempts, sessions, snapshots, blobs); running runs and shared blobs stay;
no table keeps a reference to a removed run; concurrent passes never double-delete."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator

import pytest
from psycopg.types.json import Jsonb

from onebox.agent.plan import Plan, parse_plan
from onebox.config import Settings
from onebox.objects import FsObjectStore, blob_key
from onebox.runtime.engine.retention import RetentionRule, collect
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database

DAY_S = 86400.0
TERMINAL = ("SUCCEEDED", "FAILED", "DEAD", "CANCELLED")


@pytest.fixture
async def rt(db: Database, settings: Settings) -> AsyncIterator[Runtime]:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    backend = get_backend(settings)
    yield Runtime(settings, db, backend)
    await backend.close()


def writer_plan(files: dict[str, str]) -> Plan:
    code = "".join(f"open({name!r}, 'w').write({text!r})\n" for name, text in files.items())
    return parse_plan({"steps": [{"id": "write", "tool": "python", "code": code}]})


async def finished_run(rt: Runtime, files: dict[str, str]) -> uuid.UUID:
    final = await rt.run_plan(writer_plan(files))
    assert final["status"] == "SUCCEEDED", final["error"]
    return uuid.UUID(str(final["id"]))


async def backdate(db: Database, run_id: uuid.UUID, days: float) -> None:
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE onebox.runs SET created_at = created_at - make_interval(secs => %(s)s), "
            "finished_at = finished_at - make_interval(secs => %(s)s) WHERE id = %(id)s",
            {"s": days * DAY_S, "id": run_id})


async def run_ids(db: Database) -> set[uuid.UUID]:
    return {r["id"] for r in await db.fetch("SELECT id FROM onebox.runs")}


async def references(db: Database, run_id: uuid.UUID, execution_ids: list[uuid.UUID],
                     session_ids: list[str]) -> dict[str, int]:
    """Rows in any onebox table (found through information_schema, so a future table is
    covered too) whose run_id, execution_id or session_id column names this run's things."""
    columns = await db.fetch(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = 'onebox' AND column_name IN ('run_id', 'execution_id', "
        "'session_id') ORDER BY table_name")
    assert {c["table_name"] for c in columns if c["column_name"] == "run_id"} >= {
        "plans", "task_execution", "agent_events", "llm_calls", "sessions"}
    found: dict[str, int] = {}
    values = {"run_id": [run_id], "execution_id": execution_ids, "session_id": session_ids}
    for col in columns:
        table, name = col["table_name"], col["column_name"]
        row = await db.fetchone(
            f'SELECT count(*) AS n FROM onebox."{table}" WHERE "{name}"::text = ANY(%s)',
            ([str(v) for v in values[name]],))
        assert row is not None
        if row["n"]:
            found[f"{table}.{name}"] = row["n"]
    return found


async def things_of(db: Database, run_id: uuid.UUID) -> tuple[list[uuid.UUID], list[str]]:
    attempts = await db.fetch("SELECT id FROM onebox.task_execution WHERE run_id = %s", (run_id,))
    sessions = await db.fetch("SELECT id FROM onebox.sessions WHERE run_id = %s", (run_id,))
    return [a["id"] for a in attempts], [s["id"] for s in sessions]


async def test_age_rule_removes_old_finished_runs_whole(rt: Runtime) -> None:
    old = await finished_run(rt, {"a.txt": "old"})
    new = await finished_run(rt, {"a.txt": "new"})
    await backdate(rt.db, old, days=40)
    executions, sessions = await things_of(rt.db, old)
    assert executions and sessions
    assert await references(rt.db, old, executions, sessions)  # the probe sees the run first
    report = await collect(rt.db, rt.objects, RetentionRule(max_age_s=30 * DAY_S))
    assert report.runs == 1 and report.run_ids == (str(old),)
    assert report.events > 0 and report.attempts == 1 and report.sessions == 1
    assert report.snapshots >= 1 and report.objects_deleted >= 2  # a blob and a manifest
    assert await run_ids(rt.db) == {new}
    assert await references(rt.db, old, executions, sessions) == {}


async def test_count_rule_keeps_the_newest_runs_of_each_tenant(rt: Runtime) -> None:
    runs = [await finished_run(rt, {"n.txt": str(i)}) for i in range(3)]
    other = await finished_run(rt, {"n.txt": "other tenant"})
    await backdate(rt.db, other, days=400)
    async with rt.db.transaction() as conn:
        await conn.execute("UPDATE onebox.runs SET tenant_id = 'acme' WHERE id = %s", (other,))
    report = await collect(rt.db, rt.objects, RetentionRule(max_runs=2))
    assert report.runs == 1 and report.run_ids == (str(runs[0]),)
    assert await run_ids(rt.db) == {runs[1], runs[2], other}


async def insert_run(db: Database, status: str, *, age_days: float = 0.0,
                     events: int = 2) -> uuid.UUID:
    """A run with a plan, one attempt and some events, as the runtime writes them."""
    run_id, plan_id = uuid.uuid4(), uuid.uuid4()
    trace = uuid.uuid4().hex
    when = {"s": age_days * DAY_S}
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO onebox.runs (id, trace_id, status, source, request, created_at, "
            "updated_at, finished_at) VALUES (%(id)s, %(t)s, %(st)s, 'plan', %(r)s, "
            "now() - make_interval(secs => %(s)s), now() - make_interval(secs => %(s)s), "
            "CASE WHEN %(st)s IN ('SUCCEEDED','FAILED','DEAD','CANCELLED') "
            "THEN now() - make_interval(secs => %(s)s) END)",
            {"id": run_id, "t": trace, "st": status, "r": Jsonb({}), **when})
        await conn.execute(
            "INSERT INTO onebox.plans (id, run_id, version, spec, spec_hash) "
            "VALUES (%s, %s, 1, %s, %s)", (plan_id, run_id, Jsonb({}), "0" * 64))
        await conn.execute(
            "INSERT INTO onebox.task_execution (id, run_id, plan_id, session_id, trace_id, "
            "step_id, step_number, tool_name, input_hash, status) "
            "VALUES (%s, %s, %s, %s, %s, 's1', 1, 'python', %s, 'SUCCESS')",
            (uuid.uuid4(), run_id, plan_id, f"run-{run_id}", trace, "0" * 64))
        for _ in range(events):
            await conn.execute(
                "INSERT INTO onebox.agent_events (run_id, trace_id, type, payload) "
                "VALUES (%s, %s, 'step_succeeded', '{}')", (run_id, trace))
    return run_id


async def test_running_waiting_and_active_runs_are_never_removed(rt: Runtime) -> None:
    alive = [await insert_run(rt.db, s, age_days=400) for s in ("PENDING", "RUNNING", "WAITING")]
    busy = await insert_run(rt.db, "FAILED", age_days=400)
    async with rt.db.transaction() as conn:  # its session was never released
        await conn.execute("INSERT INTO onebox.sessions (id, run_id, backend) "
                           "VALUES (%s, %s, 'linux')", (f"run-{busy}", busy))
    gone = await insert_run(rt.db, "DEAD", age_days=400)
    report = await collect(rt.db, rt.objects, RetentionRule(max_age_s=1.0, max_runs=1))
    assert report.run_ids == (str(gone),)
    assert await run_ids(rt.db) == {*alive, busy}
    assert report.events == 2 and report.attempts == 1 and report.plans == 1


async def test_a_blob_another_run_uses_is_kept_an_unshared_one_goes(rt: Runtime) -> None:
    old = await finished_run(rt, {"shared.txt": "the same bytes", "own.txt": "only old"})
    keep = await finished_run(rt, {"shared.txt": "the same bytes", "own.txt": "only keep"})
    await backdate(rt.db, old, days=40)
    store = rt.objects
    assert isinstance(store, FsObjectStore)

    def key(text: str) -> str:
        return blob_key(hashlib.sha256(text.encode()).hexdigest())

    keys = [key("the same bytes"), key("only old"), key("only keep")]
    assert await store.missing(keys) == set()  # the probe: all three are stored
    await collect(rt.db, store, RetentionRule(max_age_s=30 * DAY_S))
    assert await store.missing(keys) == {key("only old")}
    snaps = await rt.db.fetch(
        "SELECT s.id FROM onebox.snapshots s JOIN onebox.task_execution t "
        "ON t.snapshot_id = s.id WHERE t.run_id = %s", (keep,))
    assert snaps  # the kept run's snapshot still restores: its objects are all there
    objects = await rt.db.fetch(
        "SELECT key FROM onebox.snapshot_objects WHERE snapshot_id = %s", (snaps[0]["id"],))
    assert await store.missing([o["key"] for o in objects]) == set()


async def test_dry_run_counts_and_removes_nothing(rt: Runtime) -> None:
    old = await finished_run(rt, {"a.txt": "dry"})
    await backdate(rt.db, old, days=40)
    report = await collect(rt.db, rt.objects, RetentionRule(max_age_s=30 * DAY_S), dry_run=True)
    assert report.dry_run and report.runs == 1 and report.objects_deleted >= 2
    assert await run_ids(rt.db) == {old}


async def test_two_concurrent_passes_never_fail_or_double_delete(db: Database,
                                                                 settings: Settings) -> None:
    store = FsObjectStore(settings.objects_dir, fsync=False)
    rule = RetentionRule(max_age_s=DAY_S)
    for round_ in range(200):
        doomed = {await insert_run(db, "SUCCEEDED", age_days=2) for _ in range(3)}
        waits = (True, round_ % 2 == 0)  # the CLI waits; a worker skips when one runs
        reports = await asyncio.gather(*(collect(db, store, rule, batch_runs=2, wait=w)
                                         for w in waits))
        assert sum(r.runs for r in reports) == 3, reports
        assert {i for r in reports for i in r.run_ids} == {str(i) for i in doomed}
        assert sum(r.events for r in reports) == 6
        assert await run_ids(db) == set()


async def test_a_worker_applies_the_retention_setting(rt: Runtime) -> None:
    old = await finished_run(rt, {"a.txt": "worker"})
    await backdate(rt.db, old, days=40)
    rt.settings.retention.max_age_days = 30
    rt.settings.retention.interval_s = 0.05
    worker = Worker(rt.db, rt.backend, rt.settings, objects=rt.objects)
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop, drain_s=1))
    try:
        for _ in range(600):
            if old not in await run_ids(rt.db):
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await serving
    assert await run_ids(rt.db) == set()


async def test_uploads_no_run_named_expire_and_their_bytes_go_unless_a_run_uses_them(
        db: Database, settings: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An upload waits `retention.upload_ttl_h` for a run; then it goes (even with no run
    rule set), with its bytes, unless a run's input rows hold the same bytes."""
    from onebox.runtime.engine import run_files
    from onebox.runtime.engine.retention import RetentionChore

    objects = FsObjectStore(tmp_path / "objects")
    _, lone = await run_files.stage(db, objects, "acme", "lone.csv", b"nobody names me\n")
    _, used = await run_files.stage(db, objects, "acme", "used.csv", b"a run holds me\n")
    run_id = await db.fetchone("INSERT INTO onebox.runs (id, trace_id, status, source, request,"
                               " tenant_id) VALUES (gen_random_uuid(), 't', 'SUCCEEDED', 'task',"
                               " '{}', 'acme') RETURNING id")
    async with db.transaction() as conn:
        await run_files.record_inputs(conn, run_id["id"], [used])
    async with db.transaction() as conn:
        await conn.execute("UPDATE onebox.uploads SET created_at = now() - interval '25 hours'")
    assert settings.retention.max_age_days is None and settings.retention.max_runs is None
    await RetentionChore(db, settings, objects).run_once()
    assert await db.fetchone("SELECT count(*) AS n FROM onebox.uploads") == {"n": 0}
    assert not await objects.exists(blob_key(lone.sha256)), "an unnamed upload's bytes stayed"
    assert await objects.exists(blob_key(used.sha256)), "a run's input bytes were deleted"
