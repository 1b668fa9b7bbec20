"""A cancelled run's running step stops with what it printed, and a step that had finished
keeps its real result: a cancel never rewrites a result it raced with."""

from __future__ import annotations

import asyncio

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

PLAN = {"name": "cancel-me", "steps": [
    {"id": "slow", "tool": "bash", "code": "echo started; sleep 60; echo never"},
    {"id": "quick", "tool": "bash", "code": "echo done quickly"},
]}



async def test_a_cancelled_step_keeps_the_output_it_printed(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    submitted = await submit_plan(db, settings, parse_plan(PLAN))
    worker = Worker(db, backend, settings, run_id=submitted.run_id)
    serving = asyncio.create_task(worker.serve(asyncio.Event()))
    for _ in range(600):
        steps = {s["step_id"]: s for s in await runs_api.run_steps(db, submitted.run_id)}
        if steps["quick"]["status"] == "SUCCESS" and steps["slow"]["status"] == "RUNNING":
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # "started" is printed
    await runs_api.cancel_run(db, submitted.run_id)
    await asyncio.wait_for(serving, 30)
    steps = {s["step_id"]: s for s in await runs_api.run_steps(db, submitted.run_id)}
    assert steps["quick"]["status"] == "SUCCESS" and steps["quick"]["stdout"] == "done quickly\n"
    slow = steps["slow"]
    assert slow["status"] == "FAILED" and slow["error"] == "the run was cancelled"
    assert slow["stdout"] == "started\n", "the output printed before the cancel was lost"
    assert slow["duration_ms"] is not None and slow["duration_ms"] >= 400
    assert (await runs_api.get_run(db, submitted.run_id))["status"] == "CANCELLED"
