"""The runtime on the real database and the real sandbox: rows, events, retries, leases."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from onebox.agent.plan import Plan, load_plan, parse_plan
from onebox.config import Settings
from onebox.errors import Conflict, LeaseLost
from onebox.runtime.engine.archive import Outcome, archive_step
from onebox.runtime.engine.queue import claim_steps, sweep_expired
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database

QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart.yaml"


@pytest.fixture
async def rt(db: Database, settings: Settings) -> Runtime:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    backend = get_backend(settings)
    yield Runtime(settings, db, backend)  # objects: the fs store under this test's home
    await backend.close()


def plan_of(*steps: dict) -> Plan:
    return parse_plan({"steps": list(steps)})


async def events_of(db: Database, run_id: uuid.UUID) -> list[dict]:
    return await runs_api.run_events(db, run_id)


async def test_quickstart_produces_rows_and_events_in_order(rt: Runtime) -> None:
    final = await rt.run_plan(load_plan(QUICKSTART))
    assert final["status"] == "SUCCEEDED", final["error"]
    steps = await runs_api.run_steps(rt.db, final["id"])
    assert [(s["step_id"], s["status"], s["attempt"]) for s in steps] == [
        ("make_csv", "SUCCESS", 1), ("revenue_by_region", "SUCCESS", 1),
        ("units_stats", "SUCCESS", 1), ("report", "SUCCESS", 1),
    ]
    for s in steps:
        assert len(s["input_hash"]) == 64 and len(s["output_hash"]) == 64
        assert s["duration_ms"] > 0
        assert s["memory_used_mb"] is not None and s["memory_used_mb"] > 0
        assert s["cpu_usage_percent"] is not None
        assert s["session_id"] == f"run-{final['id']}"
    assert "Best region" in steps[-1]["stdout"]
    assert len({s["input_hash"] for s in steps}) == 4
    assert all(s["snapshot_id"] is not None for s in steps)
    # every step's pre snapshot is its view: the first one's is the empty workspace; the
    # stats steps start from make_csv's outputs: its post snapshot is their pre snapshot
    first = await rt.db.fetchone("SELECT file_count FROM onebox.snapshots WHERE id = %s",
                                 (steps[0]["pre_snapshot_id"],))
    assert first is not None and first["file_count"] == 0
    assert steps[1]["pre_snapshot_id"] == steps[2]["pre_snapshot_id"] == steps[0]["snapshot_id"]
    assert steps[3]["pre_snapshot_id"] is not None

    events = await events_of(rt.db, final["id"])
    types = [e["type"] for e in events]
    assert types[:3] == ["run_submitted", "plan_created", "step_queued"]
    assert types[-3:] == ["run_succeeded", "outputs_kept", "session_released"]  # kept, then released
    assert all(e["trace_id"] == final["trace_id"] for e in events)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)

    def seq(kind: str, step: str) -> int:
        return next(e["seq"] for e in events
                    if e["type"] == kind and e["payload"].get("step_id") == step)

    for s in ("make_csv", "revenue_by_region", "units_stats", "report"):
        assert seq("step_queued", s) < seq("step_started", s) < seq("step_succeeded", s)
    assert seq("step_succeeded", "make_csv") < seq("step_queued", "units_stats")
    assert max(seq("step_succeeded", "revenue_by_region"),
               seq("step_succeeded", "units_stats")) < seq("step_queued", "report")


async def test_quickstart_steps_replay_with_matching_hashes(rt: Runtime) -> None:
    from onebox.runtime.engine.archive import output_hash
    from onebox.snapshots.replay import replay

    final = await rt.run_plan(load_plan(QUICKSTART))
    assert final["status"] == "SUCCEEDED"
    for step in await runs_api.run_steps(rt.db, final["id"]):
        report = await replay(rt.db, rt.backend, rt.objects, step["id"], hash_output=output_hash)
        assert report.match, (step["step_id"], report.stdout_diff, report.stderr_diff)
        assert report.replayed_output_hash == step["output_hash"]


async def test_steps_share_the_workspace_and_run_in_parallel(rt: Runtime) -> None:
    plan = plan_of(
        {"id": "a", "tool": "bash", "code": "sleep 0.6; echo a > a.txt"},
        {"id": "b", "tool": "bash", "code": "sleep 0.6; echo b > b.txt"},
        {"id": "c", "tool": "bash", "code": "cat a.txt b.txt", "depends_on": ["a", "b"]},
    )
    final = await rt.run_plan(plan)
    assert final["status"] == "SUCCEEDED"
    steps = {s["step_id"]: s for s in await runs_api.run_steps(rt.db, final["id"])}
    assert steps["c"]["stdout"] == "a\nb\n"
    a, b = steps["a"], steps["b"]
    assert a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]


async def test_failing_step_is_retried_then_the_run_is_dead(rt: Runtime) -> None:
    plan = plan_of(
        {"id": "ok", "tool": "bash", "code": "echo fine"},
        {"id": "boom", "tool": "python", "code": "import sys; print('bad'); sys.exit(3)",
         "depends_on": ["ok"], "max_attempts": 2},
        {"id": "never", "tool": "bash", "code": "echo never", "depends_on": ["boom"]},
    )
    final = await rt.run_plan(plan)
    assert final["status"] == "DEAD"
    assert "boom" in final["error"] and "2 attempt" in final["error"]
    steps = await runs_api.run_steps(rt.db, final["id"])
    assert [(s["step_id"], s["attempt"], s["status"], s["exit_code"]) for s in steps] == [
        ("ok", 1, "SUCCESS", 0), ("boom", 1, "FAILED", 3), ("boom", 2, "FAILED", 3)]
    assert all(s["output_hash"] is None for s in steps if s["status"] != "SUCCESS")
    types = [e["type"] for e in await events_of(rt.db, final["id"])]
    assert types.count("step_failed") == 2 and "run_dead" in types


async def test_timeout_is_recorded_as_timeout(rt: Runtime) -> None:
    plan = plan_of({"id": "slow", "tool": "bash", "code": "sleep 30",
                    "limits": {"timeout_s": 0.5}, "max_attempts": 1})
    final = await rt.run_plan(plan)
    assert final["status"] == "DEAD"
    (step,) = await runs_api.run_steps(rt.db, final["id"])
    assert step["status"] == "TIMEOUT" and step["duration_ms"] < 10_000


async def test_idempotency_key_returns_the_same_run(rt: Runtime) -> None:
    plan = plan_of({"id": "a", "tool": "bash", "code": "true"})
    first = await rt.submit(plan, idempotency_key="k-1")
    again = await rt.submit(plan, idempotency_key="k-1")
    assert again.run_id == first.run_id and again.existing and not first.existing
    rows = await rt.db.fetch("SELECT count(*) AS n FROM onebox.runs")
    assert rows[0]["n"] == 1


async def test_stale_lease_cannot_write(rt: Runtime) -> None:
    settings = rt.settings
    plan = plan_of({"id": "a", "tool": "bash", "code": "true"})
    sub = await rt.submit(plan)
    settings.runtime.lease_s = 0.2
    (claimed,) = await claim_steps(rt.db, settings, "worker-A", 1, run_id=sub.run_id)
    await asyncio.sleep(0.4)
    assert await sweep_expired(rt.db, settings) == 1
    with pytest.raises(LeaseLost):
        await archive_step(rt.db, settings, claimed, Outcome("SUCCESS", output_hash="0" * 64))
    (retry,) = await claim_steps(rt.db, settings, "worker-B", 1, run_id=sub.run_id)
    assert retry["attempt"] == 2 and retry["fencing_token"] == 1
    rows = await runs_api.run_steps(rt.db, sub.run_id)
    assert [(r["attempt"], r["status"]) for r in rows] == [(1, "FAILED"), (2, "RUNNING")]
    assert "lease expired" in rows[0]["error"]


async def test_cancel_drops_queued_steps(rt: Runtime) -> None:
    plan = plan_of({"id": "a", "tool": "bash", "code": "true"},
                   {"id": "b", "tool": "bash", "code": "true"})
    sub = await rt.submit(plan)
    await runs_api.cancel_run(rt.db, sub.run_id)
    run = await runs_api.get_run(rt.db, sub.run_id)
    assert run["status"] == "CANCELLED"
    assert {s["status"] for s in await runs_api.run_steps(rt.db, sub.run_id)} == {"FAILED"}
    with pytest.raises(Conflict):
        await runs_api.cancel_run(rt.db, sub.run_id)


async def test_cancel_stops_a_running_step(rt: Runtime) -> None:
    rt.settings.runtime.heartbeat_s = 0.2
    plan = plan_of({"id": "long", "tool": "bash", "code": "sleep 60"})
    sub = await rt.submit(plan)
    driving = asyncio.create_task(rt.drive(sub.run_id))
    for _ in range(100):
        steps = await runs_api.run_steps(rt.db, sub.run_id)
        if steps and steps[0]["status"] == "RUNNING":
            break
        await asyncio.sleep(0.05)
    await runs_api.cancel_run(rt.db, sub.run_id)
    final = await asyncio.wait_for(driving, 20)
    assert final["status"] == "CANCELLED"
    (step,) = await runs_api.run_steps(rt.db, sub.run_id)
    assert step["status"] == "FAILED" and step["error"] == "the run was cancelled"
    assert step["duration_ms"] is None or step["duration_ms"] < 20_000


async def test_files_a_step_declares_become_knowledge(rt: Runtime) -> None:
    from onebox.knowledge.service import Knowledge
    from onebox.llm.embedding import embedding_model_from_settings

    plan = plan_of(
        {"id": "notes", "tool": "bash", "knowledge": ["notes.md", "missing.txt"],
         "code": "printf '# Ledger\\n\\nThe quarterly ledger balances at 4711 crowns.\\n' > notes.md;"
                 " ln -s /etc/hostname leak.txt"},
        {"id": "leak", "tool": "bash", "knowledge": ["leak.txt"], "code": "true",
         "depends_on": ["notes"]},
    )
    final = await rt.run_plan(plan)
    assert final["status"] == "SUCCEEDED"
    steps = {s["step_id"]: s for s in await runs_api.run_steps(rt.db, final["id"])}
    added = steps["notes"]["details"]["knowledge"]
    assert added[0]["path"] == "notes.md" and added[0]["status"] == "added"
    assert added[1]["path"] == "missing.txt" and "error" in added[1]
    assert "error" in steps["leak"]["details"]["knowledge"][0]  # a symlink is never followed

    model = embedding_model_from_settings(rt.settings)
    try:
        hits = await Knowledge.build(rt.db, model, rt.settings).search("ledger balance crowns", 3)
    finally:
        await model.close()
    assert hits and "4711" in hits[0].content
    provenance = hits[0].to_dict()
    assert str(steps["notes"]["id"]) in str(provenance)
    assert str(steps["notes"]["snapshot_id"]) in str(provenance)


async def test_a_result_of_several_megabytes_is_archived(rt: Runtime) -> None:
    """A step that wrote 20,000 files has megabytes of details; archiving them once hung
    the worker for good (psycopg's pipeline with a 3 MB parameter)."""
    sub = await rt.submit(plan_of({"id": "a", "tool": "bash", "code": "true"}))
    (claimed,) = await claim_steps(rt.db, rt.settings, "worker-A", 1, run_id=sub.run_id)
    files = [{"path": f"many/{i}", "change": "created", "size": 1, "sha256": "0" * 64}
             for i in range(20_000)]
    outcome = Outcome("SUCCESS", exit_code=0, output_hash="0" * 64,
                      details={"files_written": files})
    state = await asyncio.wait_for(archive_step(rt.db, rt.settings, claimed, outcome), 60)
    assert state == "SUCCEEDED"
    async with rt.db.connection() as conn:
        cur = await conn.execute("SELECT details FROM onebox.task_execution WHERE id = %s",
                                 (claimed["id"],))
        row = await cur.fetchone()
    assert len(row["details"]["files_written"]) == 20_000
