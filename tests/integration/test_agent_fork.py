"""Forking a task run at a step with another profile: what the agent observed before the
step is kept (no model is asked again, no step runs again), and its model calls from the
step on go to the new profile's model, on the workspace as it was before the step."""

from __future__ import annotations

import uuid

import pytest
from run_helpers import serve_until_ended
from test_profiles import with_model

from onebox.config import Settings
from onebox.errors import ValidationError
from onebox.objects.registry import get_object_store
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.worker import Worker
from onebox.runtime.models.profiles import parse_profile, save_profile
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.forks import fork_run
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "double the number", "entities": [], "capabilities": ["python"],
          "formats": [], "risks": [], "fallbacks": []}
PLAN = {"name": "double", "steps": [
    {"id": "write", "tool": "bash", "code": "echo 4 > n.txt; echo wrote"},
    {"id": "double", "tool": "python", "goal": "print twice the number in n.txt",
     "depends_on": ["write"]},
    {"id": "answer", "kind": "final", "depends_on": ["double"],
     "input": {"answer": "{{ double.stdout }}"}},
]}
TWICE = {"code": "print(int(open('n.txt').read()) * 2)"}
THRICE = {"code": "print(int(open('n.txt').read()) * 3)"}


async def _calls(db: Database, run_id: uuid.UUID) -> list[tuple[str, str]]:
    rows = await db.fetch("SELECT purpose, model FROM onebox.llm_calls WHERE run_id = %s "
                          "ORDER BY id", (run_id,))
    return [(r["purpose"], r["model"]) for r in rows]


async def test_a_task_forked_at_a_goal_step_asks_only_the_new_profile_from_that_step(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    a, b = with_model(settings, "model-a"), with_model(settings, "model-b")
    async with db.connection() as conn:
        await save_profile(conn, settings, "default", parse_profile(
            {"name": "other", "model": "model-b"}))
    parent, _ = await submit_task(db, "double the number", settings=a)
    model_a = ScriptedModel([INTENT, PLAN, TWICE])
    await serve_until_ended([Worker(db, backend, a, model=model_a, objects=get_object_store(a))], db, parent)
    run = await runs_api.get_run(db, parent)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"].strip() == "8"
    assert [p for p, _ in await _calls(db, parent)] == ["intent", "plan", "write_code"]

    forked = await fork_run(db, settings, parent, "default", at="double", profile="other")
    model_b = ScriptedModel([THRICE])  # one answer: a second call would raise
    await serve_until_ended([Worker(db, backend, b, model=model_b, objects=get_object_store(b))],
                            db, forked.run_id)
    child = await runs_api.get_run(db, forked.run_id)
    assert child["status"] == "SUCCEEDED", child["error"]
    assert child["answer"].strip() == "12", "the new model's code ran on the 4 in n.txt"
    assert child["request"]["fork"] == {"run_id": str(parent), "at": "double",
                                        "profile": "other"}
    assert child["profile"]["model"] == "model-b"
    assert [p for p, _ in await _calls(db, forked.run_id)] == ["write_code"]
    assert len(model_b.requests) == 1 and len(model_a.requests) == 3
    steps = {s["step_id"]: s for s in await runs_api.run_steps(db, forked.run_id)}
    assert steps["write"]["details"]["inherited_from"], "write was kept, not run"
    assert steps["model:plan#a4"]["details"]["inherited_from"]
    events = await runs_api.run_events(db, forked.run_id)
    started = {e["payload"]["step_id"] for e in events if e["type"] == "step_started"}
    assert "write" not in started and not any(s.startswith("model:intent") or
                                              s.startswith("model:plan") for s in started)
    assert "double" in started
    assert set(forked.inherited) >= {"model:intent#a1", "model:plan#a4", "write"}


async def test_an_agent_run_is_forked_with_a_profile_not_a_changed_step(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    a = with_model(settings, "model-a")
    parent, _ = await submit_task(db, "double the number", settings=a)
    await serve_until_ended([Worker(db, backend, a, model=ScriptedModel(
        [INTENT, PLAN, TWICE]))], db, parent)
    with pytest.raises(ValidationError, match="another profile") as caught:
        await fork_run(db, settings, parent, "default", at="double",
                       changes={"double.code": "print(1)"})
    assert caught.value.field == "set"
    with pytest.raises(ValidationError, match="never acted on step 'nope'.*double"):
        await fork_run(db, settings, parent, "default", at="nope")
