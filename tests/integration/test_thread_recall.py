"""A thread remembers what was said: each turn's words are stored as an episode when its
upkeep runs (no model call), recalled verbatim in later turns beyond the recent window,
listed in the stored context, never across threads or tenants, and always within the
profile's token budget (real database and embeddings, real sandbox, scripted model)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from run_helpers import serve_until_ended

from onebox.config import Settings
from onebox.knowledge.service import Knowledge
from onebox.objects.registry import get_object_store
from onebox.runtime.engine.worker import Worker
from onebox.runtime.models.profiles import parse_profile, save_profile
from onebox.runtime.services import explain as explain_api
from onebox.runtime.services import runs as runs_api
from onebox.runtime.threads import service as threads
from onebox.runtime.threads import upkeep as thread_upkeep
from onebox.runtime.threads.context import MEMORY_SHARE
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "chat", "entities": [], "capabilities": [], "formats": [], "risks": [],
          "fallbacks": []}
SAID = "my bike lock combination is 7291, please remember it"
NO_FACTS = {"facts": []}  # the model extracts nothing: only the episode can carry the words


def answer_plan(answer: str) -> dict[str, Any]:
    return {"name": "answer", "steps": [{"id": "answer", "kind": "final",
                                         "input": {"answer": answer}}]}


pytestmark = pytest.mark.onebox_settings({"llm.model": "scripted"})


async def thread_with(db: Database, settings: Settings, tenant: str = "default", *,
                      context_turns: int = 0, context_tokens: int = 4000,
                      memory_share: float | None = None) -> threads.Thread:
    name = f"p{uuid.uuid4().hex[:8]}"
    async with db.transaction() as conn:
        await save_profile(conn, settings, tenant, parse_profile({
            "name": name, "model": "scripted", "context_turns": context_turns,
            "context_tokens": context_tokens, "context_memory_share": memory_share}))
    return await threads.create_thread(db, settings, tenant, profile=name)


async def turn(db: Database, settings: Settings, knowledge: Knowledge,
               backend: SandboxBackend, thread: threads.Thread, message: str,
               answer: str) -> threads.Posted:
    """One whole turn: the agent answers, then its upkeep (no facts, a summary) runs."""
    posted = await threads.post_message(db, settings, knowledge, thread.tenant_id, thread.id,
                                        message)
    model = ScriptedModel([INTENT, answer_plan(answer), NO_FACTS, {"summary": "A chat."}])
    w = Worker(db, backend, settings, model=model, objects=get_object_store(settings))
    await serve_until_ended([w], db, posted.run_id)
    run = await runs_api.get_run(db, posted.run_id)
    assert run["status"] == "SUCCEEDED", run["error"]
    return posted


async def test_a_turns_words_are_recalled_in_a_later_turn_beyond_the_recent_window(
        db: Database, settings: Settings, knowledge: Knowledge,
        backend: SandboxBackend) -> None:
    thread = await thread_with(db, settings, context_turns=1)
    await turn(db, settings, knowledge, backend, thread, SAID, "Noted.")
    await turn(db, settings, knowledge, backend, thread, "what's the weather like?",
               "I cannot see outside.")
    third = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                       "what was my bike lock combination?")
    recent = third.context.part("recent")
    assert recent is not None and recent.sources == ("turn:2",)  # turn 1 is out of the window
    memories = third.context.part("memories")
    assert memories is not None and "7291" in memories.text and "- turn 1: user:" in memories.text
    assert "agent: Noted." in memories.text  # the answer is part of the episode
    run = await runs_api.get_run(db, third.run_id)
    assert "7291" in run["request"]["task"]


async def test_the_stored_context_lists_the_episodes_it_used(
        db: Database, settings: Settings, knowledge: Knowledge,
        backend: SandboxBackend) -> None:
    thread = await thread_with(db, settings)
    first = await turn(db, settings, knowledge, backend, thread, SAID, "Noted.")
    second = await threads.post_message(db, settings, knowledge, "default", thread.id,
                                        "which combination did I give you?")
    shown = await threads.show_thread(db, "default", thread.id)
    record = shown["turns"][1]["context"]
    steps = await runs_api.run_steps(db, first.run_id)
    facts_step = next(s for s in steps if s["step_id"] == "upkeep:facts")
    episode_id = facts_step["details"]["episode"]["id"]
    assert record["episodes"] == [episode_id]
    assert episode_id in record["parts"]["memories"]["sources"]
    rows = await explain_api.explain(db, second.run_id)
    reason = next(r["reason"] for r in rows if r["kind"] == "context")
    assert "said in turn 1" in reason and "7291" in reason


async def test_another_tenants_or_another_threads_turns_never_enter_a_context(
        db: Database, settings: Settings, knowledge: Knowledge) -> None:
    mine = await thread_with(db, settings)
    sibling = await threads.create_thread(db, settings, "default")
    other = await threads.create_thread(db, settings, "acme")
    when = datetime(2026, 11, 1, tzinfo=UTC)
    foreign = set()
    for n, t in enumerate((sibling, other), start=1):
        stored = await thread_upkeep.remember_turn(knowledge, t, {
            "turn": n, "run_id": uuid.uuid4(), "created_at": when, "message": SAID,
            "answer": "Noted."})
        foreign.add(stored["id"])
    ctx = await threads.gather_context(db, knowledge, mine, "what is my bike lock combination?")
    memories = ctx.part("memories")
    assert memories is None and not ctx.episodes
    sibling_ctx = await threads.gather_context(db, knowledge, sibling, "bike lock combination?")
    assert set(sibling_ctx.episodes) <= foreign and sibling_ctx.episodes  # the probe reaches


@pytest.mark.parametrize("share", [None, 0.3])
async def test_the_budget_is_never_exceeded_with_many_long_memories(
        db: Database, settings: Settings, knowledge: Knowledge, share: float | None) -> None:
    thread = await thread_with(db, settings, context_tokens=300, memory_share=share)
    when = datetime(2026, 11, 1, tzinfo=UTC)
    story = "the long story of the bike lock, the garage door and the shed key goes on " * 3
    for n in range(1, 9):
        await thread_upkeep.remember_turn(knowledge, thread, {
            "turn": n, "run_id": uuid.uuid4(), "created_at": when,
            "message": f"part {n}: {story}", "answer": f"answer {n}"})
    ctx = await threads.gather_context(db, knowledge, thread, "tell me about the bike lock")
    memories = ctx.part("memories")
    assert memories is not None and memories.sources  # long memories were recalled
    assert ctx.total_tokens <= 300  # the memories' share: the profile's, else the default
    assert memories.tokens <= int(300 * (share or MEMORY_SHARE))
    assert ctx.dropped["memories"] > 0  # the rest did not fit


async def test_a_recalled_turn_brings_the_turn_before_it_of_its_own_thread_only(
        db: Database, settings: Settings, knowledge: Knowledge) -> None:
    mine = await thread_with(db, settings, context_tokens=300)
    sibling = await threads.create_thread(db, settings, "default")
    when = datetime(2026, 11, 1, tzinfo=UTC)
    said = ["Could you keep something for me?", SAID] + [
        f"my red u-lock number {n} came from the bike shop" for n in range(3, 15)]
    for n, message in enumerate(said, start=1):
        await thread_upkeep.remember_turn(knowledge, mine, {
            "turn": n, "run_id": uuid.uuid4(), "created_at": when, "message": message,
            "answer": None})
    foreign = await thread_upkeep.remember_turn(knowledge, sibling, {
        "turn": 1, "run_id": uuid.uuid4(), "created_at": when,
        "message": "Could you keep a secret for me?", "answer": None})
    query = "what was my bike lock combination?"
    plain = await threads.gather_context(db, knowledge, mine, query)
    near = await threads.gather_context(db, knowledge, mine, query,
                                        threads.RecallOptions(neighbours=True))
    plain_text, near_text = (c.part("memories").text for c in (plain, near))  # type: ignore[union-attr]
    assert "7291" in plain_text and "keep something" not in plain_text  # turn 1: not recalled
    assert "turn 1: user: Could you keep something" in near_text  # its neighbour
    assert foreign["id"] not in near.episodes and "a secret" not in near_text
    assert near.total_tokens <= 300 and len(set(near.episodes)) == len(near.episodes)
