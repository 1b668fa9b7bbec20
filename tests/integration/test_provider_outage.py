"""A model provider outage makes a run WAIT with the reason and retry; past the limit it is
FAILED, and a FAILED run can be retried once the provider is back."""

from __future__ import annotations

import pytest
from run_helpers import serve_until_ended

from onebox.config import Settings
from onebox.errors import ProviderError
from onebox.runtime.agent import runs as agent_runs
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "say hi", "entities": [], "capabilities": ["bash"], "formats": [],
          "risks": [], "fallbacks": []}
PLAN = {"name": "hi", "steps": [{"id": "hi", "tool": "bash", "code": "echo hi"}]}


@pytest.fixture(autouse=True)
def quick_outage_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_runs, "OUTAGE_BACKOFF_BASE_S", 0.2)  # seconds, not minutes


async def test_an_outage_waits_with_the_reason_then_the_run_goes_on(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    down = ProviderError("503 Service Unavailable from the endpoint")
    model = ScriptedModel([down, down, INTENT, PLAN])
    run_id, _ = await submit_task(db, "say hi", settings=settings)
    seen: list[str] = []
    await serve_until_ended([Worker(db, backend, settings, model=model)], db, run_id, seen=seen)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    waiting = [s for s in seen if s.startswith("WAITING|")]
    assert waiting and "waiting for the model provider" in waiting[0]
    assert "503 Service Unavailable" in waiting[0]
    types = [e["type"] for e in await runs_api.run_events(db, run_id)]
    assert types.count("run_waiting") == 2 and "run_resumed" in types
    intent = [(s["attempt"], s["status"]) for s in await runs_api.run_steps(db, run_id)
              if s["step_id"] == "model:intent#a1"]
    assert intent == [(1, "FAILED"), (2, "FAILED"), (3, "SUCCESS")]


async def test_past_the_limit_the_run_fails_and_can_be_retried(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    settings.llm.outage_attempts = 2
    down = ProviderError("connection refused")
    model = ScriptedModel([down, down])
    run_id, _ = await submit_task(db, "say hi", settings=settings)
    await serve_until_ended([Worker(db, backend, settings, model=model)], db, run_id)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "FAILED"
    assert "failed 2 times in a row" in run["error"] and "onebox retry" in run["error"]

    assert await runs_api.retry_run(db, settings, run_id) == ["model:intent#a1"]
    model.add(INTENT, PLAN)  # the provider is back
    await serve_until_ended([Worker(db, backend, settings, model=model)], db, run_id)
    run = await runs_api.get_run(db, run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
