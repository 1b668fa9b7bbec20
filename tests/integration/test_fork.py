"""Forking a run at a step: the steps before it are inherited (not run again), the workspace
is the parent's just before that step, and the run goes on from it with the change."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.objects.fs import FsObjectStore
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.forks import fork_run
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

PLAN = {"name": "five", "steps": [
    {"id": "s1", "tool": "bash", "code": "echo one > log.txt"},
    {"id": "s2", "tool": "bash", "code": "echo two >> log.txt", "depends_on": ["s1"]},
    {"id": "s3", "tool": "bash", "code": "echo three >> log.txt", "depends_on": ["s2"]},
    {"id": "s4", "tool": "bash", "code": "wc -l < log.txt", "depends_on": ["s3"]},
    {"id": "s5", "tool": "bash", "code": "tail -1 log.txt", "depends_on": ["s4"]},
]}


async def _finish(db: Database, backend: SandboxBackend, settings: Settings,
                  objects: FsObjectStore, run_id: uuid.UUID) -> dict[str, object]:
    stop = asyncio.Event()
    worker = Worker(db, backend, settings, run_id=run_id, objects=objects)
    task = asyncio.create_task(worker.serve(stop, drain_s=5))
    try:
        for _ in range(600):
            run = await runs_api.get_run(db, run_id)
            if run["status"] in ("SUCCEEDED", "FAILED", "DEAD"):
                return dict(run)
            await asyncio.sleep(0.05)
        raise AssertionError("the run did not end")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_a_fork_at_step_3_inherits_1_and_2_and_reruns_from_the_workspace_before_3(
        db: Database, backend: SandboxBackend, settings: Settings, tmp_path: Path) -> None:
    objects = FsObjectStore(tmp_path / "objects", fsync=False)
    parent = (await submit_plan(db, settings, parse_plan(PLAN))).run_id
    assert (await _finish(db, backend, settings, objects, parent))["status"] == "SUCCEEDED"
    before = {s["step_id"]: s for s in await runs_api.run_steps(db, parent)}
    assert before["s5"]["stdout"] == "three\n" and before["s4"]["stdout"].strip() == "3"

    forked = await fork_run(db, settings, parent, "default", at="s3",
                            changes={"s3.code": "echo THREE >> log.txt"})
    assert forked.inherited == ("s1", "s2") and forked.rerun == ("s3", "s4", "s5")
    run = await _finish(db, backend, settings, objects, forked.run_id)
    assert run["status"] == "SUCCEEDED" and run["request"]["fork"] == {
        "run_id": str(parent), "at": "s3"}
    steps = {s["step_id"]: s for s in await runs_api.run_steps(db, forked.run_id)}
    assert steps["s5"]["stdout"] == "THREE\n", "the answer changed with the change"
    assert steps["s4"]["stdout"].strip() == "3", "s3 ran on the workspace as it was before s3"
    for inherited in ("s1", "s2"):
        assert steps[inherited]["details"]["inherited_from"] == str(before[inherited]["id"])
        assert steps[inherited]["output_hash"] == before[inherited]["output_hash"]
    events = await runs_api.run_events(db, forked.run_id)
    started = [e["payload"]["step_id"] for e in events if e["type"] == "step_started"]
    assert sorted(started) == ["s3", "s4", "s5"], "inherited steps were not executed"
    assert [e["payload"]["step_id"] for e in events if e["type"] == "step_inherited"] \
        == ["s1", "s2"]
    assert sum(1 for s in await runs_api.run_steps(db, forked.run_id)) == 5
    await objects.close()


async def test_what_cannot_be_forked_says_why(
        db: Database, backend: SandboxBackend, settings: Settings, tmp_path: Path) -> None:
    objects = FsObjectStore(tmp_path / "objects", fsync=False)
    parent = (await submit_plan(db, settings, parse_plan(PLAN))).run_id
    with pytest.raises(Conflict, match="once it has ended"):
        await fork_run(db, settings, parent, "default", at="s3")
    await _finish(db, backend, settings, objects, parent)
    with pytest.raises(NotFound):
        await fork_run(db, settings, parent, "another-tenant", at="s3")
    with pytest.raises(ValidationError, match="not in the fork's plan"):
        await fork_run(db, settings, parent, "default", at="nope")
    with pytest.raises(ValidationError, match="STEP.FIELD"):
        await fork_run(db, settings, parent, "default", at="s3", changes={"zz.code": "x"})
    await db.fetch("UPDATE onebox.task_execution SET pre_snapshot_id = NULL WHERE run_id = %s "
                   "AND step_id = 's3' RETURNING id", (parent,))
    with pytest.raises(Conflict, match="no snapshot of the workspace before"):
        await fork_run(db, settings, parent, "default", at="s3")
    await objects.close()


TEN = {"name": "ten", "steps": [
    {"id": f"d{n}", "tool": "bash", "code": f"echo {n} > d{n}.txt; cat d*.txt | wc -l",
     **({"depends_on": [f"d{n - 1}"]} if n else {})} for n in range(10)]}


async def test_a_deterministic_run_replays_as_ten_matches_and_a_clock_step_differs(
        db: Database, backend: SandboxBackend, settings: Settings, tmp_path: Path) -> None:
    from onebox.runtime.services.replays import replay_here

    async def replay_run(*args: Any) -> dict[str, Any]:
        return await replay_here(db, backend, objects, settings, *args[3:])

    objects = FsObjectStore(tmp_path / "objects", fsync=False)
    steady = (await submit_plan(db, settings, parse_plan(TEN))).run_id
    assert (await _finish(db, backend, settings, objects, steady))["status"] == "SUCCEEDED"
    report = await replay_run(db, backend, objects, steady, "default")
    assert (report["replayed"], report["matches"], report["model_calls"]) == (10, 10, 0)
    assert report["first_difference"] is None
    again = await runs_api.get_run(db, uuid.UUID(report["replay_run_id"]))
    assert again["status"] == "SUCCEEDED" and again["request"] == {
        "replay": {"run_id": str(steady)}}, "the replay is a run of its own, marked as one"
    replayed = {s["step_id"]: s for s in await runs_api.run_steps(db, again["id"])}
    assert len(replayed) == 10 and all(s["details"]["match"] for s in replayed.values())
    original = {s["step_id"]: s for s in await runs_api.run_steps(db, steady)}
    assert replayed["d9"]["details"]["replay_of"] == str(original["d9"]["id"])
    assert replayed["d9"]["stdout"] == original["d9"]["stdout"] == "10\n"

    clocked = {"name": "clock", "steps": [
        TEN["steps"][0], {"id": "now", "tool": "bash", "code": "date +%s%N > now.txt; cat now.txt",
                          "depends_on": ["d0"]},
        {"id": "after", "tool": "bash", "code": "echo done", "depends_on": ["now"]}]}
    run = (await submit_plan(db, settings, parse_plan(clocked))).run_id
    await _finish(db, backend, settings, objects, run)
    report = await replay_run(db, backend, objects, run, "default")
    assert report["first_difference"]["step_id"] == "now"
    assert report["first_difference"]["stdout_diff"].startswith("---")
    assert "now.txt" in str(report["first_difference"]["files"])
    assert report["matches"] == 2 and report["replayed"] == 3
    again = await runs_api.get_run(db, uuid.UUID(report["replay_run_id"]))
    assert again["status"] == "FAILED" and "step now differs" in again["error"]
    await objects.close()


async def test_a_diff_of_a_fork_and_its_parent_names_the_changed_step_its_output_and_files(
        db: Database, backend: SandboxBackend, settings: Settings, tmp_path: Path) -> None:
    from onebox.runtime.services.run_compare import diff_runs

    objects = FsObjectStore(tmp_path / "objects", fsync=False)
    parent = (await submit_plan(db, settings, parse_plan(PLAN))).run_id
    await _finish(db, backend, settings, objects, parent)
    forked = await fork_run(db, settings, parent, "default", at="s3",
                            changes={"s3.code": "echo THREE >> log.txt"})
    await _finish(db, backend, settings, objects, forked.run_id)
    found = await diff_runs(db, objects, parent, forked.run_id, "default")
    assert found["first_difference"] == "s3" and found["differing"] == ["s3", "s5"], found["differing"]
    by = {s["step_id"]: s for s in found["steps"]}
    assert by["s1"]["same"] and by["s2"]["b"]["inherited_from"] and by["s4"]["same"]
    assert by["s3"]["files"]["files"][0]["path"] == "log.txt"
    assert "-three" in by["s3"]["files"]["files"][0]["diff"]
    assert "+THREE" in by["s5"]["stdout"]["diff"]
    with pytest.raises(NotFound):
        await diff_runs(db, objects, parent, forked.run_id, "another-tenant")
    await objects.close()


async def test_a_fork_cannot_raise_a_limit_past_the_operators_cap(
        db: Database, backend: SandboxBackend, settings: Settings, tmp_path: Path) -> None:
    """A tenant's changes go through the same caps as a submitted plan (before: a fork with
    s3.limits.memory_mb past sandbox.max_memory_mb was accepted)."""
    from onebox.errors import PolicyViolation

    objects = FsObjectStore(tmp_path / "objects", fsync=False)
    parent = (await submit_plan(db, settings, parse_plan(PLAN))).run_id
    await _finish(db, backend, settings, objects, parent)
    too_much = settings.sandbox.max_memory_mb + 1
    with pytest.raises(PolicyViolation, match="operator cap"):
        await fork_run(db, settings, parent, "default", at="s3",
                       changes={"s3.limits.memory_mb": too_much})
    assert await db.fetchone("SELECT 1 FROM onebox.runs WHERE request -> 'fork' IS NOT NULL") \
        is None, "nothing was created"
    await objects.close()
