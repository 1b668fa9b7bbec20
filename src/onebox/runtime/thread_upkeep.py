"""After a turn: its facts go into the thread's memory, and the rolling summary takes it in.

Both are model calls recorded in ``llm_calls`` under the turn's run (purposes
``thread_facts`` and ``thread_summary``, action ids ``thread:facts#<turn>`` and
``thread:summary#<turn>``), each followed by a ``thread_facts`` / ``thread_summary`` event
on the run. They are durable steps: a turn is marked done (``thread_turns.upkept_at``) in
the transaction that ends its upkeep; one that was interrupted is taken again, and a call
already recorded is not made again (its recorded reply is used). Facts are remembered in
the thread's scope, deduplicated and superseded as memory does for every memory; the
summary update is fenced on the version it read.

Upkeep runs when the next message is posted (before its context is built) and in
``onebox chat`` as soon as a turn ends.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

from onebox.agent.actions import CallModel, Decision
from onebox.agent.prompting import extract_json, prompt
from onebox.config import Settings
from onebox.knowledge.collections import tenant_name
from onebox.knowledge.service import Knowledge
from onebox.llm.base import ChatModel, ChatRequest, ChatResponse, Message
from onebox.llm.registry import chat_model_from_settings, price_table
from onebox.runtime.model_calls import call_model
from onebox.runtime.profiles import get_profile, llm_settings_for
from onebox.runtime.threads import Q, Thread, get_thread
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)
SYSTEM = ("You keep the memory of a conversation between a user and an assistant. Answer "
          "with exactly one JSON object and nothing else.")
MAX_FACTS = 20
MAX_FACT_CHARS = 1000
SUMMARY_WORDS = 250


async def upkeep_thread(db: Database, settings: Settings, knowledge: Knowledge, thread: Thread,
                        *, model: ChatModel | None = None) -> Thread:
    """Take the facts and the summary of every ended turn not taken yet; the thread as it is
    afterwards."""
    async with db.connection() as conn:
        pending = await _rows(conn, "ended_turns_to_upkeep", {"thread_id": thread.id})
    if not pending:
        return thread
    chat = model or await thread_model(db, settings, thread)
    for turn in pending:
        await upkeep_turn(db, settings, knowledge, chat, thread, turn)
        thread = await get_thread(db, thread.tenant_id, thread.id)
    return thread


async def thread_model(db: Database, settings: Settings, thread: Thread) -> ChatModel:
    """The chat model of the thread's profile (the configured one when it has none)."""
    if thread.profile is None:
        return chat_model_from_settings(settings.llm)
    async with db.connection() as conn:
        spec = (await get_profile(conn, thread.tenant_id, thread.profile))["spec"]
    return chat_model_from_settings(llm_settings_for(spec, settings.llm))


async def upkeep_turn(db: Database, settings: Settings, knowledge: Knowledge, model: ChatModel,
                      thread: Thread, turn: Mapping[str, Any]) -> None:
    """The facts of one ended turn, then the summary with it, then the turn marked done."""
    run_id, number = turn["run_id"], int(turn["turn"])
    answer = _answer_of(turn)
    facts = await _facts(db, settings, model, run_id, number, turn["message"], answer)
    remembered = [await _remember(knowledge, thread, turn, fact) for fact in facts]
    summary = await _summary(db, settings, model, thread, run_id, number, turn["message"],
                             answer)
    async with db.transaction() as conn:
        await conn.execute(Q["set_summary"], {"id": thread.id, "summary": summary,
                                              "version": thread.summary_version,
                                              "summarized_turns": number})
        marked = await conn.execute(Q["mark_upkept"], {
            "thread_id": thread.id, "turn": number, "facts": Jsonb(remembered)})
        if marked.rowcount:
            trace = await _trace(conn, run_id)
            await store.append_event(conn, run_id, "thread_facts", {
                "turn": number, "memories": remembered}, trace_id=trace)
            await store.append_event(conn, run_id, "thread_summary", {
                "turn": number, "version": thread.summary_version + 1,
                "tokens": len(summary.split())}, trace_id=trace)


def _answer_of(turn: Mapping[str, Any]) -> str:
    if turn.get("answer"):
        return str(turn["answer"])
    return f"(the turn ended {str(turn.get('status') or 'without an answer').lower()})"


async def _facts(db: Database, settings: Settings, model: ChatModel, run_id: uuid.UUID,
                 number: int, message: str, answer: str) -> list[str]:
    text = prompt("thread_facts").substitute(message=message, answer=answer)
    reply = await _call(db, settings, model, run_id, f"thread:facts#{number}", "thread_facts",
                        text)
    data = _json(reply)
    facts = data.get("facts") if isinstance(data, dict) else None
    if not isinstance(facts, list):
        log.warning("turn %s of run %s: the facts reply has no list 'facts'", number, run_id)
        return []
    kept = [str(f).strip()[:MAX_FACT_CHARS] for f in facts if str(f).strip()]
    return kept[:MAX_FACTS]


async def _summary(db: Database, settings: Settings, model: ChatModel, thread: Thread,
                   run_id: uuid.UUID, number: int, message: str, answer: str) -> str:
    text = prompt("thread_summary").substitute(
        summary=thread.summary or "(empty)", turn=number, message=message, answer=answer,
        max_words=SUMMARY_WORDS)
    reply = await _call(db, settings, model, run_id, f"thread:summary#{number}",
                        "thread_summary", text)
    data = _json(reply)
    summary = data.get("summary") if isinstance(data, dict) else None
    if not isinstance(summary, str) or not summary.strip():
        log.warning("turn %s of run %s: the summary reply has no 'summary'; the summary "
                    "keeps the turn verbatim", number, run_id)
        return f"{thread.summary}\nTurn {number}: {message[:500]} -> {answer[:500]}".strip()
    return summary.strip()


async def _call(db: Database, settings: Settings, model: ChatModel, run_id: uuid.UUID,
                action_id: str, purpose: str, text: str) -> ChatResponse:
    """One recorded model call; the recorded reply when this action was made already."""
    async with db.connection() as conn:
        recorded = await store.fetch_one(conn, "recorded_model_reply", {
            "run_id": run_id, "action_id": action_id})
    if recorded is not None:
        return ChatResponse.from_dict(recorded["response"])
    request = ChatRequest(messages=(Message.system(SYSTEM), Message.user(text)),
                          json_output=True, temperature=0.0)
    action = CallModel(action_id, Decision("finish", f"{purpose} after the turn"),
                       purpose=purpose, request=request)
    reply = await call_model(db, model, action, run_id=run_id,
                             prices=price_table(settings.llm))
    return reply.response


def _json(response: ChatResponse) -> Any:
    try:
        return extract_json(response)
    except ValueError:
        return None


async def _remember(knowledge: Knowledge, thread: Thread, turn: Mapping[str, Any],
                    fact: str) -> dict[str, Any]:
    scope = tenant_name(thread.tenant_id, thread.memory_scope)
    stored = await knowledge.memory.remember(
        scope, fact, metadata={"thread_id": str(thread.id), "turn": int(turn["turn"]),
                               "run_id": str(turn["run_id"])},
        valid_from=turn.get("created_at"))
    return {"id": stored["id"], "content": fact,
            "deduplicated": bool(stored.get("deduplicated")),
            "superseded": list(stored.get("superseded") or [])}


async def _rows(conn: store.Conn, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = await conn.execute(Q[name], params)
    return list(await cur.fetchall())


async def _trace(conn: store.Conn, run_id: uuid.UUID) -> str | None:
    run = await store.fetch_one(conn, "get_run", {"run_id": run_id})
    return str(run["trace_id"]).strip() if run else None
