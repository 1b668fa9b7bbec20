"""Threads: turns share the thread's workspace and remember through memory (real database,
real sandbox, scripted model)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from onebox.config import Settings
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.knowledge.service import Knowledge
from onebox.runtime.engine.worker import Worker
from onebox.runtime.models.profiles import parse_profile, save_profile
from onebox.runtime.services import explain as explain_api
from onebox.runtime.services import runs as runs_api
from onebox.runtime.threads import service as threads
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "keep a note", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
SAVE = {"name": "save", "steps": [
    {"id": "save", "tool": "python",
     "code": "open('notes.txt', 'w').write('launch code 4417'); print('saved')"},
    {"id": "answer", "kind": "final", "depends_on": ["save"],
     "input": {"answer": "I saved the launch code in notes.txt"}}]}
READ = {"name": "read", "steps": [
    {"id": "read", "tool": "python", "code": "print(open('notes.txt').read())"},
    {"id": "answer", "kind": "final", "depends_on": ["read"],
     "input": {"answer": "{{ read.stdout }}"}}]}
FACT = "The user's launch code is 4417 and it is kept in the file notes.txt."


pytestmark = pytest.mark.onebox_settings({"runtime.lease_s": 1.5, "llm.model": "scripted"})


async def drive(db: Database, backend: SandboxBackend, settings: Settings, run_id: uuid.UUID,
                model: ScriptedModel) -> dict:
    from onebox.objects.registry import get_object_store

    worker = Worker(db, backend, settings, run_id=run_id, model=model,
                    objects=get_object_store(settings))
    await asyncio.wait_for(worker.serve(asyncio.Event()), 90)
    return await runs_api.get_run(db, run_id)


async def memory_only_thread(db: Database, settings: Settings) -> threads.Thread:
    """A thread whose turns see no earlier turn verbatim: only the summary and memory."""
    async with db.transaction() as conn:
        await save_profile(conn, settings, "default", parse_profile(
            {"name": "recall", "model": "scripted", "context_turns": 0}))
    return await threads.create_thread(db, settings, "default", title="notes",
                                       profile="recall")


async def test_two_turns_share_the_workspace_and_remember_through_memory(
        db: Database, backend: SandboxBackend, settings: Settings,
        knowledge: Knowledge) -> None:
    thread = await memory_only_thread(db, settings)
    first = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                       "please keep my launch code 4417 in a file")
    run = await drive(db, backend, settings, first.run_id, ScriptedModel([
        INTENT, SAVE, {"facts": [FACT]}, {"summary": "The user keeps notes in the workspace."}]))
    assert run["status"] == "SUCCEEDED", run["error"]
    second = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                        "what is my launch code?")
    agent = ScriptedModel([INTENT, READ])
    run = await drive(db, backend, settings, second.run_id, agent)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"].strip() == "launch code 4417"  # the file turn 1 wrote
    assert second.turn == 2 and second.context.part("recent") is None
    memories = second.context.part("memories")
    assert memories is not None and "4417" in memories.text
    task = run["request"]["task"]
    assert "4417" in task and "Turn 1, user:" not in task  # memory (turn 1's episode), not history
    assert "4417" in (agent.requests[0].messages[-1].content or "")
    calls = await db.fetch("SELECT purpose FROM onebox.llm_calls WHERE run_id = %s ORDER BY id",
                           (first.run_id,))
    assert [c["purpose"] for c in calls] == ["intent", "plan", "thread_facts", "thread_summary"]


async def test_the_stored_context_explains_what_the_agent_believed(
        db: Database, backend: SandboxBackend, settings: Settings,
        knowledge: Knowledge) -> None:
    thread = await memory_only_thread(db, settings)
    first = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                       "please keep my launch code 4417 in a file")
    await drive(db, backend, settings, first.run_id, ScriptedModel([
        INTENT, SAVE, {"facts": [FACT]}, {"summary": "Notes are in notes.txt."}]))
    second = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                        "what is my launch code?")
    shown = await threads.show_thread(db, "default", thread.id)
    turn1, turn2 = shown["turns"]
    assert turn1["facts"][0]["content"] == FACT  # not repeated: turn 1's own words are in
    assert turn2["context"]["parts"]["memories"]["sources"] == turn2["context"]["episodes"]
    assert turn2["context"]["summary_version"] == 1
    assert shown["thread"]["summary"] == "Notes are in notes.txt."
    rows = await explain_api.explain(db, second.run_id)
    context = [r for r in rows if r["kind"] == "context"]
    assert context and "4417" in context[0]["reason"] and "said in turn 1" in context[0]["reason"]


async def test_another_tenant_cannot_see_or_use_the_thread(
        db: Database, settings: Settings, knowledge: Knowledge) -> None:
    thread = await threads.create_thread(db, settings, "acme", title="secret plans")
    assert [t.id for t in await threads.list_threads(db, "acme")] == [thread.id]
    assert await threads.list_threads(db, "default") == []
    with pytest.raises(NotFound):
        await threads.get_thread(db, "default", thread.id)
    with pytest.raises(NotFound):
        await threads.post_message(db, settings, knowledge, "default", thread.id, "hello")
    with pytest.raises(NotFound):
        await threads.remove_thread(db, knowledge, "default", thread.id)
    await threads.get_thread(db, "acme", thread.id)  # still there


async def test_bad_input_gets_clear_errors(db: Database, settings: Settings,
                                           knowledge: Knowledge) -> None:
    with pytest.raises(NotFound, match="onebox profile list"):
        await threads.create_thread(db, settings, "default", profile="nope")
    with pytest.raises(ValidationError, match="title"):
        await threads.create_thread(db, settings, "default", title="x" * 500)
    with pytest.raises(ValidationError, match="not a UUID"):
        threads.parse_thread_id("t1")
    thread = await threads.create_thread(db, settings, "default")
    with pytest.raises(ValidationError, match="message is empty"):
        await threads.post_message(db, settings, knowledge, "default", thread.id, "  ")
    await threads.post_message(db, settings, knowledge, "default", thread.id, "hello")
    with pytest.raises(Conflict, match="still running"):
        await threads.post_message(db, settings, knowledge, "default", thread.id, "again")


async def test_removing_a_thread_forgets_its_memories(db: Database, settings: Settings,
                                                      knowledge: Knowledge) -> None:
    thread = await threads.create_thread(db, settings, "default")
    scope = f"default/{thread.memory_scope}"
    await knowledge.memory.remember(scope, FACT)
    assert await threads.remove_thread(db, knowledge, "default", thread.id) == 1
    assert await knowledge.memory.recall(scope, "launch code") == []
    with pytest.raises(NotFound):
        await threads.show_thread(db, "default", thread.id)
