"""Agent (task) runs through the durable runtime: real database, real sandbox, scripted model."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from onebox.config import Settings
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "summarise numbers", "entities": [], "capabilities": ["python"],
          "formats": ["csv"], "risks": [], "fallbacks": []}
PARALLEL = {"name": "agent-plan", "steps": [
    {"id": "load", "tool": "python", "code": "open('n.txt','w').write('3 4 5'); print('loaded')"},
    {"id": "total", "tool": "bash", "code": "awk '{for (i = 1; i <= NF; i++) s += $i; print s}' n.txt", "depends_on": ["load"]},
    {"id": "count", "tool": "python", "depends_on": ["load"],
     "code": "import json, os\nn = len(open('n.txt').read().split())\nprint(n)\n"
             "json.dump({'n': n}, open(os.environ['ONEBOX_RESULT'], 'w'))"},
    {"id": "answer", "kind": "final", "depends_on": ["total", "count"],
     "input": {"answer": "total {{ total.stdout }} over {{ count.result.n }} numbers"}},
]}


pytestmark = pytest.mark.onebox_settings({"runtime.lease_s": 1.5})


async def drive(db: Database, backend: SandboxBackend, settings: Settings, run_id: uuid.UUID,
                model: ScriptedModel) -> Worker:
    from onebox.objects.registry import get_object_store

    worker = Worker(db, backend, settings, run_id=run_id, model=model,
                    objects=get_object_store(settings))
    await asyncio.wait_for(worker.serve(asyncio.Event()), 90)
    return worker


async def test_task_with_two_parallel_branches(db: Database, backend: SandboxBackend,
                                               settings: Settings) -> None:
    run_id, _ = await submit_task(db, "add up 3 4 5 and count them")
    model = ScriptedModel([INTENT, PARALLEL])
    await drive(db, backend, settings, run_id, model)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    steps = {s["step_id"]: s for s in await runs_api.run_steps(db, run_id)}
    model_work = {k: v["tool_name"] for k, v in steps.items()
                  if v["tool_name"] in ("model", "check", "lookup")}
    assert model_work == {"model:intent#a1": "model", "lookup#a3": "lookup",
                          "model:plan#a4": "model", "check:total#a7": "check"}
    assert {k: v["status"] for k, v in steps.items() if k not in model_work
            and k != "answer"} == {"load": "SUCCESS", "total": "SUCCESS", "count": "SUCCESS"}
    assert steps["total"]["stdout"].strip() == "12"
    assert steps["total"]["memory_used_mb"] is not None
    assert all(steps[k]["snapshot_id"] is not None for k in ("load", "total", "count"))
    events = await runs_api.run_events(db, run_id)
    types = [e["type"] for e in events]
    assert "intent" in types and "plan_created" in types and "agent_finished" in types
    finished = next(e for e in events if e["type"] == "agent_finished")
    assert finished["payload"]["answer"] == "total 12\n over 3 numbers"
    calls = await db.fetch("SELECT purpose, prompt_tokens FROM onebox.llm_calls "
                           "WHERE run_id = %s ORDER BY id", (run_id,))
    assert [c["purpose"] for c in calls] == ["intent", "plan"]
    plans = await db.fetch("SELECT version FROM onebox.plans WHERE run_id = %s", (run_id,))
    assert [p["version"] for p in plans] == [1]


async def test_crashed_agent_run_resumes_without_calling_the_model_again(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    plan = {"steps": [
        {"id": "a", "tool": "bash", "code": "echo a >> ledger.txt"},
        {"id": "b", "tool": "bash", "code": "echo b >> ledger.txt; sleep 3",
         "depends_on": ["a"]},
        {"id": "c", "tool": "bash", "code": "echo c >> ledger.txt; cat ledger.txt",
         "depends_on": ["b"]},
    ]}
    run_id, _ = await submit_task(db, "write a ledger")
    first = Worker(db, backend, settings, run_id=run_id, model=ScriptedModel([INTENT, plan]))
    serving = asyncio.create_task(first.serve(asyncio.Event()))

    async def b_running() -> bool:
        rows = await runs_api.run_steps(db, run_id)
        return any(r["step_id"] == "b" and r["status"] == "RUNNING" for r in rows)
    for _ in range(400):
        if await b_running():
            break
        await asyncio.sleep(0.05)
    for task in list(first._running.values()):  # the worker dies mid-step: no more writes
        task.cancel()
    await asyncio.sleep(0.1)
    serving.cancel()
    await asyncio.gather(serving, return_exceptions=True)

    second_model = ScriptedModel([])  # any model call would raise
    await drive(db, backend, settings, run_id, second_model)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert second_model.requests == []
    steps = [(s["step_id"], s["attempt"], s["status"]) for s in await runs_api.run_steps(db, run_id)]
    assert ("a", 1, "SUCCESS") in steps and ("a", 2, "SUCCESS") not in steps
    assert [s for s in steps if s[0] == "b"] == [("b", 1, "FAILED"), ("b", 2, "SUCCESS")]
    ledger = next(s for s in await runs_api.run_steps(db, run_id) if s["step_id"] == "c")["stdout"]
    assert ledger.split().count("a") == 1 and ledger.split().count("c") == 1


async def test_agent_approval_waits_then_resumes(db: Database, backend: SandboxBackend,
                                                 settings: Settings) -> None:
    plan = {"steps": [
        {"id": "gate", "kind": "approval", "input": {"prompt": "go?"}},
        {"id": "go", "tool": "bash", "code": "echo went", "depends_on": ["gate"]},
    ]}
    run_id, _ = await submit_task(db, "ask first")
    worker = Worker(db, backend, settings, run_id=run_id, model=ScriptedModel([INTENT, plan]))
    serving = asyncio.create_task(worker.serve(asyncio.Event()))
    for _ in range(400):
        if (await runs_api.get_run(db, run_id))["status"] == "WAITING":
            break
        await asyncio.sleep(0.05)
    assert (await runs_api.get_run(db, run_id))["status"] == "WAITING"
    assert await runs_api.approve_step(db, settings, run_id, "gate", approve=True, by="ann") \
        == "RUNNING"
    await asyncio.wait_for(serving, 60)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    go = next(s for s in await runs_api.run_steps(db, run_id) if s["step_id"] == "go")
    assert go["stdout"] == "went\n"


async def test_without_a_model_the_run_fails_saying_what_to_set(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    run_id, _ = await submit_task(db, "anything")
    worker = Worker(db, backend, settings, run_id=run_id)
    await asyncio.wait_for(worker.serve(asyncio.Event()), 30)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "FAILED"
    assert "ONEBOX_LLM__MODEL" in run["error"] and "OPENAI_BASE_URL" in run["error"]


async def test_agent_knowledge_search_sees_only_its_tenant(db: Database, backend: SandboxBackend,
                                                           settings: Settings) -> None:
    from onebox.knowledge.service import Knowledge
    from onebox.llm.embedding import embedding_model_from_settings

    model = embedding_model_from_settings(settings)
    try:
        kn = Knowledge.build(db, model, settings)
        await kn.kb.add_text("mine", "The acme launch code is copper falcon.", collection="acme/docs")
        await kn.kb.add_text("theirs", "The globex launch code is silver otter.",
                             collection="globex/docs")
    finally:
        await model.close()
    plan = {"steps": [{"id": "look", "kind": "knowledge_search", "input": {"query": "launch code"}},
                      {"id": "done", "kind": "final", "depends_on": ["look"],
                       "input": {"answer": "{{ look.stdout }}"}}]}
    run_id, _ = await submit_task(db, "what is the launch code?", tenant_id="acme")
    await drive(db, backend, settings, run_id, ScriptedModel([INTENT, plan]))
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    look = next(s for s in await runs_api.run_steps(db, run_id) if s["step_id"] == "look")
    assert "copper falcon" in look["stdout"] and "silver otter" not in look["stdout"]
