"""After a turn: its facts go into the thread's memory, and the rolling summary takes it in.

This is the worker's side of a turn's upkeep steps (``upkeep:facts`` then
``upkeep:summary``, queued when the turn's agent finishes: see
:mod:`onebox.runtime.threads.steps`). Each step is one model call recorded in ``llm_calls``
under the turn's run (purposes ``thread_facts`` and ``thread_summary``, action ids
``thread:facts#<turn>`` and ``thread:summary#<turn>``): a step retried after its worker
was lost uses the recorded reply and pays for no second call. The facts step remembers the
facts in the thread's scope (deduplicated and superseded as memory does for every memory,
so remembering them again on a retry adds nothing); the summary step returns the new
summary, which the step's archive writes, fenced on the version it read.

Before its model call the facts step also remembers the turn itself, verbatim (clipped) and
dated: an **episode** (``metadata.episode``), so what was said is recalled later whatever
the model chose to extract (no model call; remembering it again on a retry adds nothing).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from onebox.agent.actions import CallModel, Decision
from onebox.agent.hashing import canonical_hash
from onebox.agent.prompting import extract_json, prompt
from onebox.config import Settings
from onebox.errors import ConfigError, NotFound, OneboxError, ProviderError
from onebox.knowledge.collections import tenant_name
from onebox.knowledge.service import Knowledge
from onebox.llm.base import ChatModel, ChatRequest, ChatResponse, Message
from onebox.llm.registry import price_table
from onebox.model_calls import call_model
from onebox.runtime.agent.runs import outage_backoff_s, provider_back
from onebox.runtime.engine.archive import Outcome, archive_attempt
from onebox.runtime.engine.kinds import Performed, Worker
from onebox.runtime.threads import steps as thread_steps
from onebox.runtime.threads.service import Q, Thread, get_thread
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)
SYSTEM = ("You keep the memory of a conversation between a user and an assistant. Answer "
          "with exactly one JSON object and nothing else.")
MAX_FACTS = 20
MAX_FACT_CHARS = 1000
SUMMARY_WORDS = 250
EPISODE_CHARS = 600  # of the message, and of the answer, kept in a turn's episode
# what the user lost when the model's upkeep reply was unusable: the step's details "note",
# which `onebox chat` shows
NO_FACTS = ("the facts of this turn were not saved to memory: the model's reply had no list "
            "of facts (the turn itself is remembered word for word)")
NO_SUMMARY = ("the summary did not take this turn in: the model's reply had no summary (the "
              "summary keeps the turn word for word)")


@dataclasses.dataclass(frozen=True)
class Upkeep:
    """What an upkeep step needs: the database, settings, memory and the run's model."""

    db: Database
    settings: Settings
    knowledge: Knowledge
    model: ChatModel


async def perform(up: Upkeep, run: store.Row, row: store.Row) -> Outcome:
    """Perform one claimed upkeep step of a turn's run; its outcome carries what the archive
    writes (the remembered facts, or the new summary and the version it replaces). A
    failure is a FAILED outcome (``final`` when no model is configured or the thread was
    removed: retrying cannot help)."""
    try:
        thread, turn = await _turn(up.db, run)
        if row["details"]["upkeep"] == "facts":
            details = await _facts_step(up, thread, turn)
        else:
            details = await _summary_step(up, thread, turn)
    except OneboxError as exc:
        return Outcome("FAILED", error=f"{exc.code}: {exc.message}", details={
            "upkeep": row["details"]["upkeep"], "final": isinstance(exc, ConfigError | NotFound),
            "provider": isinstance(exc, ProviderError)})
    text = json.dumps(details, default=str, ensure_ascii=False)
    return Outcome("SUCCESS", exit_code=0, stdout=text[-64_000:], details=details,
                   output_hash=canonical_hash({"result": json.loads(text)}))


async def _turn(db: Database, run: store.Row) -> tuple[Thread, dict[str, Any]]:
    async with db.connection() as conn:
        cur = await conn.execute(Q["turn_of_run"], {"run_id": run["id"]})
        turn: dict[str, Any] | None = await cur.fetchone()
    if turn is None:
        raise NotFound(f"run {run['id']} is no turn of a thread (its thread was removed)",
                       field="thread_id")
    turn = {**turn, "answer": await _agent_answer(db, run["id"])}
    return await get_thread(db, turn["tenant_id"], turn["thread_id"]), turn


async def _agent_answer(db: Database, run_id: uuid.UUID) -> str:
    async with db.connection() as conn:
        cur = await conn.execute(Q["agent_finished_of"], {"run_id": run_id})
        done = await cur.fetchone()
    payload = dict(done["payload"]) if done else {}
    if payload.get("ok") and payload.get("answer"):
        return str(payload["answer"])
    return f"(the turn ended without an answer: {payload.get('error') or 'no reason given'})"


async def _facts_step(up: Upkeep, thread: Thread, turn: dict[str, Any]) -> dict[str, Any]:
    episode = await remember_turn(up.knowledge, thread, turn)
    facts = await _facts(up.db, up.settings, up.model, turn["run_id"], int(turn["turn"]),
                         turn["message"], turn["answer"])
    if facts is None:
        return {"upkeep": "facts", "memories": [], "episode": episode, "note": NO_FACTS}
    remembered = [await _remember(up.knowledge, thread, turn, fact) for fact in facts]
    return {"upkeep": "facts", "memories": remembered, "episode": episode}


async def _summary_step(up: Upkeep, thread: Thread, turn: dict[str, Any]) -> dict[str, Any]:
    number, message, answer = int(turn["turn"]), turn["message"], turn["answer"]
    summary = await _summary(up.db, up.settings, up.model, thread, turn["run_id"], number,
                             message, answer)
    if summary is None:
        verbatim = f"{thread.summary}\nTurn {number}: {message[:500]} -> {answer[:500]}"
        return {"upkeep": "summary", "summary": verbatim.strip(),
                "version": thread.summary_version, "note": NO_SUMMARY}
    return {"upkeep": "summary", "summary": summary, "version": thread.summary_version}


async def _facts(db: Database, settings: Settings, model: ChatModel, run_id: uuid.UUID,
                 number: int, message: str, answer: str) -> list[str] | None:
    """The facts the model drew from the turn; None when its reply had no list of them (a
    model's mistake: the step says so in its details, the log has it at INFO)."""
    text = prompt("thread_facts").substitute(message=message, answer=answer)
    reply = await _call(db, settings, model, run_id, f"thread:facts#{number}", "thread_facts",
                        text)
    data = _json(reply)
    facts = data.get("facts") if isinstance(data, dict) else None
    if not isinstance(facts, list):
        log.info("turn %s of run %s: the facts reply has no list 'facts'", number, run_id)
        return None
    kept = [str(f).strip()[:MAX_FACT_CHARS] for f in facts if str(f).strip()]
    return kept[:MAX_FACTS]


async def _summary(db: Database, settings: Settings, model: ChatModel, thread: Thread,
                   run_id: uuid.UUID, number: int, message: str, answer: str) -> str | None:
    """The new summary; None when the model's reply had none (logged at INFO)."""
    text = prompt("thread_summary").substitute(
        summary=thread.summary or "(empty)", turn=number, message=message, answer=answer,
        max_words=SUMMARY_WORDS)
    reply = await _call(db, settings, model, run_id, f"thread:summary#{number}",
                        "thread_summary", text)
    data = _json(reply)
    summary = data.get("summary") if isinstance(data, dict) else None
    if not isinstance(summary, str) or not summary.strip():
        log.info("turn %s of run %s: the summary reply has no 'summary'; the summary keeps "
                 "the turn verbatim", number, run_id)
        return None
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


def episode_text(message: str, answer: str | None) -> str:
    """A turn as its episode remembers it: the user's words, then the agent's (clipped)."""
    text = f"user: {_clip(message)}"
    return f"{text}\nagent: {_clip(answer)}" if answer and answer.strip() else text


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= EPISODE_CHARS else text[:EPISODE_CHARS].rstrip() + " [...]"


async def remember_turn(knowledge: Knowledge, thread: Thread,
                        turn: Mapping[str, Any]) -> dict[str, Any]:
    """Remember the turn verbatim in the thread's scope (an episode, dated with the turn); an
    episode supersedes no other memory (the same words said twice keep the first one)."""
    scope = tenant_name(thread.tenant_id, thread.memory_scope)
    stored = await knowledge.memory.remember(
        scope, episode_text(str(turn["message"]), turn.get("answer")),
        metadata={"thread_id": str(thread.id), "turn": int(turn["turn"]),
                  "run_id": str(turn["run_id"]), "episode": True},
        valid_from=turn.get("created_at"), auto_supersede=False)
    return {"id": stored["id"], "deduplicated": bool(stored.get("deduplicated"))}


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


class TurnUpkeep:
    """The step kind of a thread turn's upkeep (its facts, then the summary), queued once
    the turn's agent has answered: it takes over the run from the agent
    (:meth:`continues`), performs each upkeep step and ends the run with the answer.
    Registered as the ``thread_upkeep`` entry point of ``onebox.step_kinds``; it goes before
    the agent's kind, whose rows its own also look like."""

    name = "thread_upkeep"
    priority = 20
    interruptible = True

    def handles(self, row: store.Row) -> bool:
        return thread_steps.is_upkeep_row(row)

    async def perform(self, worker: Worker, row: store.Row) -> Performed:
        async with worker.db.connection() as conn:
            run = await store.fetch_one(conn, "get_run", {"run_id": row["run_id"]})
        assert run is not None
        try:
            model = worker.chat_model(run["profile"])
        except ConfigError as exc:
            return Performed(None, Outcome("FAILED", error=f"{exc.code}: {exc.message}",
                                           details={"upkeep": row["details"]["upkeep"],
                                                    "final": True}))
        up = Upkeep(worker.db, worker.settings, await worker.runner.knowledge.knowledge(), model)
        return Performed(None, await perform(up, run, row))

    async def archive(self, worker: Worker, row: store.Row, performed: Performed) -> str | None:
        outcome = performed.outcome
        outage = thread_steps.Outage(worker.settings.llm.outage_attempts, outage_backoff_s)

        async def then(conn: store.Conn, run: store.Row, row: store.Row) -> str | None:
            if row["status"] == "SUCCESS" and run["status"] == "WAITING":
                await provider_back(conn, run)
            return await thread_steps.archived(conn, run, row, outcome.details, outage=outage)

        return await archive_attempt(worker.db, row, outcome, then)

    async def lost(self, conn: store.Conn, settings: Settings, run: store.Row,
                   row: store.Row) -> None:
        await thread_steps.after_failure(conn, run, row)

    def continues(self, run: store.Row) -> bool:
        return thread_steps.is_thread_turn(run)

    async def after_answer(self, conn: store.Conn, run: store.Row) -> None:
        await thread_steps.queue_upkeep(conn, run, "facts")


UPKEEP = TurnUpkeep()
