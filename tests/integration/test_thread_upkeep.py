"""A thread turn's upkeep (facts, then summary) as durable steps of the turn's run: a worker
lost during upkeep leaves it to another, which reuses the recorded model call; an upkeep
that keeps failing ends the turn with its answer and the next context says the summary is
behind (real database, sandbox, embeddings; scripted model)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from run_helpers import serve_until_ended

from onebox.config import Settings
from onebox.errors import ProviderError
from onebox.knowledge.service import Knowledge
from onebox.objects.registry import get_object_store
from onebox.runtime.agent import runs as agent_runs
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import explain as explain_api
from onebox.runtime.services import runs as runs_api
from onebox.runtime.threads import service as threads
from onebox.runtime.threads import upkeep as thread_upkeep
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "keep a note", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
SAVE = {"name": "save", "steps": [
    {"id": "save", "tool": "python", "code": "open('notes.txt', 'w').write('4417')"},
    {"id": "answer", "kind": "final", "depends_on": ["save"],
     "input": {"answer": "I saved the launch code in notes.txt"}}]}
FACT = "The user's launch code is 4417 and it is kept in the file notes.txt."
SUMMARY = {"summary": "The user keeps a launch code in notes.txt."}


pytestmark = pytest.mark.onebox_settings({"runtime.lease_s": 1.5, "llm.model": "scripted"})


def worker(db: Database, backend: SandboxBackend, settings: Settings,
           model: ScriptedModel, name: str) -> Worker:
    return Worker(db, backend, settings, model=model, name=name,
                  objects=get_object_store(settings))


async def upkeep_steps(db: Database, run_id: uuid.UUID) -> list[tuple[str, int, str]]:
    return sorted((s["step_id"], s["attempt"], s["status"])
                  for s in await runs_api.run_steps(db, run_id)
                  if s["step_id"].startswith("upkeep:"))


async def test_a_worker_lost_during_upkeep_leaves_it_to_another_without_a_second_call(
        db: Database, backend: SandboxBackend, settings: Settings, knowledge: Knowledge,
        monkeypatch: pytest.MonkeyPatch) -> None:
    thread = await threads.create_thread(db, settings, "default")
    posted = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                        "please keep my launch code 4417 in a file")
    died = asyncio.Event()
    remember = thread_upkeep._remember

    async def dies_after_the_recorded_call(*args: Any) -> dict[str, Any]:
        died.set()  # the facts call is recorded; the worker is gone before it archives
        raise asyncio.CancelledError

    monkeypatch.setattr(thread_upkeep, "_remember", dies_after_the_recorded_call)
    first_model = ScriptedModel([INTENT, SAVE, {"facts": [FACT]}])
    stop = asyncio.Event()
    first = asyncio.create_task(worker(db, backend, settings, first_model, "w1").serve(stop))
    await asyncio.wait_for(died.wait(), 60)
    stop.set()
    await first  # nothing was released: the attempt's lease expires
    monkeypatch.setattr(thread_upkeep, "_remember", remember)
    assert (await runs_api.get_run(db, posted.run_id))["status"] == "RUNNING"

    second_model = ScriptedModel([SUMMARY])  # only the summary is left to ask for
    await serve_until_ended([worker(db, backend, settings, second_model, "w2")], db,
                            posted.run_id)
    run = await runs_api.get_run(db, posted.run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"] == "I saved the launch code in notes.txt"  # the agent's, unchanged
    assert len(second_model.requests) == 1
    assert "summary" in (second_model.requests[0].messages[-1].content or "")
    calls = await db.fetch("SELECT purpose FROM onebox.llm_calls WHERE run_id = %s "
                           "AND error IS NULL ORDER BY id", (posted.run_id,))
    assert [c["purpose"] for c in calls] == ["intent", "plan", "thread_facts", "thread_summary"]
    assert await upkeep_steps(db, posted.run_id) == [
        ("upkeep:facts", 1, "FAILED"), ("upkeep:facts", 2, "SUCCESS"),
        ("upkeep:summary", 1, "SUCCESS")]
    shown = await threads.show_thread(db, "default", thread.id)
    assert [f["content"] for f in shown["turns"][0]["facts"]] == [FACT]
    assert shown["thread"]["summary"] == SUMMARY["summary"]
    types = [e["type"] for e in await runs_api.run_events(db, posted.run_id)]
    assert types.index("agent_finished") < types.index("thread_facts") \
        < types.index("thread_summary") < types.index("run_succeeded")
    assert await explain_api.explain(db, posted.run_id)  # the upkeep rows explain like steps


async def test_a_failing_upkeep_ends_the_turn_with_its_answer_and_the_next_context_says_so(
        db: Database, backend: SandboxBackend, settings: Settings,
        knowledge: Knowledge, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.runtime.max_attempts = 2
    settings.llm.outage_attempts = 2  # a provider outage: the run waits, up to this many calls
    monkeypatch.setattr(agent_runs, "OUTAGE_BACKOFF_BASE_S", 0.1)
    thread = await threads.create_thread(db, settings, "default")
    posted = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                        "please keep my launch code 4417 in a file")
    down = ProviderError("the provider is down")
    model = ScriptedModel([INTENT, SAVE, down, down])
    await serve_until_ended([worker(db, backend, settings, model, "w1")], db, posted.run_id)
    run = await runs_api.get_run(db, posted.run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"] == "I saved the launch code in notes.txt"
    assert await upkeep_steps(db, posted.run_id) == [
        ("upkeep:facts", 1, "FAILED"), ("upkeep:facts", 2, "FAILED")]
    shown = await threads.show_thread(db, "default", thread.id)
    assert "provider is down" in shown["turns"][0]["upkeep_error"]
    assert shown["turns"][0]["upkept_at"] is None

    second = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                        "what is my launch code?")  # not blocked
    summary = second.context.part("summary")
    assert summary is not None and "summary is behind: turn(s) 1" in summary.text
