"""Forking a thread at a turn: the fork holds the conversation before that turn (turns,
memory, summary, workspace), asks nothing again, and goes on without the later turns."""

from __future__ import annotations

import pytest
from test_threads import INTENT, READ, drive, memory_only_thread

from onebox.config import Settings
from onebox.errors import NotFound, ValidationError
from onebox.knowledge.service import Knowledge
from onebox.runtime.threads import service as threads
from onebox.runtime.threads.forking import fork_thread
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

pytestmark = pytest.mark.onebox_settings({"runtime.lease_s": 1.5, "llm.model": "scripted"})


def write(code: str) -> dict:
    return {"name": "save", "steps": [
        {"id": "save", "tool": "python",
         "code": f"open('notes.txt', 'w').write('launch code {code}'); print('saved')"},
        {"id": "answer", "kind": "final", "depends_on": ["save"],
         "input": {"answer": f"I saved {code}"}}]}


async def test_a_thread_forked_at_turn_2_sees_turn_1_and_not_turn_2(
        db: Database, backend: SandboxBackend, settings: Settings,
        knowledge: Knowledge) -> None:
    thread = await memory_only_thread(db, settings)
    one = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                     "keep my launch code 4417 in a file")
    await drive(db, backend, settings, one.run_id, ScriptedModel([
        INTENT, write("4417"), {"facts": ["The user's launch code is 4417."]},
        {"summary": "The user keeps the launch code 4417 in notes.txt."}]))
    two = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                     "the launch code is now 9999; keep it")
    run = await drive(db, backend, settings, two.run_id, ScriptedModel([
        INTENT, write("9999"), {"facts": ["The user's launch code is 9999."]},
        {"summary": "The launch code changed to 9999."}]))
    assert run["status"] == "SUCCEEDED", run["error"]

    forked = await fork_thread(db, settings, knowledge, "default", thread.id, turn=2,
                               message="what is my launch code?")
    assert forked.copied_turns == 1 and forked.posted is not None
    assert forked.thread.forked_from == {"thread_id": str(thread.id), "turn": 2}
    assert forked.thread.summary == "The user keeps the launch code 4417 in notes.txt."
    context = forked.posted.context.part("memories")
    assert context is not None and "4417" in context.text and "9999" not in context.text
    run = await drive(db, backend, settings, forked.posted.run_id, ScriptedModel([
        INTENT, READ, {"facts": []}, {"summary": "The user asked for the code."}]))
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"].strip() == "launch code 4417", "the workspace before turn 2"

    turns = await threads.thread_turns(db, "default", forked.thread.id)
    assert [(t["turn"], t["run_id"]) for t in turns][:1] == [(1, one.run_id)], \
        "turn 1 is the parent's run: nothing was asked again"
    assert turns[1]["message"] == "what is my launch code?"
    parent_turns = await threads.thread_turns(db, "default", thread.id)
    assert [t["run_id"] for t in parent_turns] == [one.run_id, two.run_id], \
        "the parent is unchanged"
    recalled = await knowledge.memory.recall(f"default/thread-{thread.id}", "launch code", k=10)
    assert any("9999" in h.content for h in recalled), "the parent keeps its own memory"


async def test_what_cannot_be_forked_says_why(db: Database, settings: Settings,
                                              knowledge: Knowledge) -> None:
    thread = await threads.create_thread(db, settings, "default", title="empty")
    with pytest.raises(ValidationError, match="has no turn 1") as caught:
        await fork_thread(db, settings, knowledge, "default", thread.id, turn=1)
    assert caught.value.field == "turn"
    with pytest.raises(NotFound):
        await fork_thread(db, settings, knowledge, "another-tenant", thread.id, turn=1)
