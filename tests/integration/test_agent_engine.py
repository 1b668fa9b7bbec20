"""Task runs on the one engine: model work is queued, claimed and archived like code steps."""

from __future__ import annotations

import asyncio

import pytest
from run_helpers import serve_until_ended

from onebox.config import Settings
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.agent.steps import AgentWork
from onebox.runtime.engine.executor import StepRunner
from onebox.runtime.engine.queue import claim_steps
from onebox.runtime.engine.step_knowledge import StepKnowledge
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "four sums", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
FOUR = {"name": "four", "steps": [
    {"id": f"s{i}", "tool": "python", "code": f"import time; time.sleep(1.5); print({i})"}
    for i in range(4)]}


pytestmark = pytest.mark.onebox_settings({"runtime.lease_s": 1.5})


async def test_an_agent_runs_parallel_steps_on_two_workers(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, _ = await submit_task(db, "four sums", settings=settings)
    model = ScriptedModel([INTENT, FOUR])
    workers = [Worker(db, backend, settings, concurrency=1, model=model, name=f"w{i}")
               for i in range(2)]
    await serve_until_ended(workers, db, run_id)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    started = [e for e in await runs_api.run_events(db, run_id) if e["type"] == "step_started"]
    code = {e["payload"]["step_id"]: e["payload"]["worker"] for e in started
            if e["payload"]["step_id"].startswith("s")}
    assert set(code) == {"s0", "s1", "s2", "s3"}
    assert set(code.values()) == {"w0", "w1"}, code


async def test_a_recorded_model_call_is_not_made_again_after_a_crash(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, _ = await submit_task(db, "four sums", settings=settings)
    first_model = ScriptedModel([INTENT])
    runner = StepRunner(backend, settings, None, StepKnowledge(db, settings))
    work = AgentWork(db, runner, lambda _profile: first_model)
    [row] = await claim_steps(db, settings, "dying-worker", 1, run_id=run_id)
    assert row["step_id"] == "model:intent#a1" and row["tool_name"] == "model"
    await work.perform(row)  # the call is made and recorded; the worker dies before archiving
    await runner.knowledge.close()
    assert len(first_model.requests) == 1
    await asyncio.sleep(settings.runtime.lease_s + 0.2)

    second_model = ScriptedModel([FOUR])  # only the plan is left to ask for
    await serve_until_ended([Worker(db, backend, settings, model=second_model)], db, run_id)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert len(second_model.requests) == 1
    steps = [(s["step_id"], s["attempt"], s["status"])
             for s in await runs_api.run_steps(db, run_id) if s["tool_name"] == "model"]
    assert ("model:intent#a1", 1, "FAILED") in steps and ("model:intent#a1", 2, "SUCCESS") in steps
    calls = await db.fetch("SELECT purpose FROM onebox.llm_calls WHERE run_id = %s", (run_id,))
    assert sorted(c["purpose"] for c in calls) == ["intent", "plan"]


async def test_a_rolled_back_observation_never_lingers_in_the_cached_agent(
        db: Database, settings: Settings) -> None:
    from onebox.agent.actions import ModelReply
    from onebox.llm.base import ChatResponse, Message
    from onebox.runtime.agent import engine as agent_engine

    run_id, _ = await submit_task(db, "four sums", settings=settings)
    run = await runs_api.get_run(db, run_id)
    reply = ModelReply("a1", ChatResponse(Message.assistant('{"goal": "x"}'), model="m"))

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with db.transaction() as conn:
            await agent_engine.observe(conn, run, None, reply)
            raise Abort  # e.g. the fenced write failed after the observation was stored
    async with db.connection() as conn:
        replayed = await agent_engine.replay(conn, run)
    assert replayed.waiting("a1") is not None, "the rolled-back observation was kept"
    async with db.transaction() as conn:
        await agent_engine.observe(conn, run, None, reply)
    async with db.connection() as conn:
        assert (await agent_engine.replay(conn, run)).waiting("a1") is None
