"""A thread turn's upkeep as steps of its run, on the one engine (the engine's side).

When a thread turn's agent reaches Finish, its answer is recorded (``agent_finished``) but
the run does not end yet: its upkeep is queued as ``task_execution`` rows, ``upkeep:facts``
then ``upkeep:summary``, model work claimed only by a worker serving the run's model
(``needs_model``), leased, fenced, retried and archived like any step. The worker performs
them (:func:`onebox.runtime.threads.upkeep.perform`); this module decides, in the archive's
transaction, what follows: the facts' step stores the turn's facts and queues the summary's;
the summary's step writes the summary (fenced on the version it read), marks the turn
upkept, and ends the run with the agent's answer, unchanged.

A provider outage takes the agent's outage path (:class:`Outage`, given by the engine): the
run WAITS with the reason (its answer is already recorded: ``agent_finished``) and the step
is tried again with the outage's growing delays, up to ``llm.outage_attempts`` calls, not
spending the step's own attempts; when the provider answers again the engine sets the run
RUNNING again (``run_resumed``), as for any model step. An upkeep step that fails past its
attempts (or past the outage's, or cannot run at all: no model configured) does not lose the
answer nor block the thread: the turn gets a ``thread_upkeep_failed`` event (``onebox
thread show`` lists it; the next turn's context says the summary is behind) and the run
ends as the agent ended it.

No model and no knowledge here (the worker's side has them); this module imports nothing
that imports the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from onebox.agent.hashing import canonical_hash
from onebox.runtime.engine.archive import finish_run
from onebox.runtime.engine.schedule import backoff_s
from onebox.runtime.engine.submit import queue_attempt, run_session_id
from onebox.runtime.models.profiles import needs_model
from onebox.store import runs as store
from onebox.store.queries import load_queries

Q = load_queries("threads")
PARTS = ("facts", "summary")
DEFAULT_ATTEMPTS = 3


@dataclass(frozen=True)
class Outage:
    """How the engine rides out a model provider outage: at most ``attempts`` calls, the
    ``n``-th retried after ``backoff_s(n)`` seconds."""

    attempts: int
    backoff_s: Callable[[int], float]


def is_thread_turn(run: store.Row) -> bool:
    """Whether a run is a turn of a thread (its request names the thread and turn)."""
    return isinstance((run.get("request") or {}).get("thread"), dict)


def is_upkeep_row(row: store.Row) -> bool:
    details = row.get("details") or {}
    return isinstance(details, dict) and details.get("upkeep") in PARTS


def upkeep_step_id(part: str) -> str:
    return f"upkeep:{part}"


async def queue_upkeep(conn: store.Conn, run: store.Row, part: str, *, attempt: int = 1,
                       delay_s: float = 0.0, max_attempts: int = 0) -> None:
    """Queue one upkeep step of the turn (its ``attempt``-th try, of at least
    ``max_attempts``)."""
    turn = int(run["request"]["thread"]["turn"])
    attempts = int((run["request"].get("agent") or {}).get("max_attempts") or DEFAULT_ATTEMPTS)
    attempts = max(attempts, max_attempts)
    base = {"run_id": run["id"], "plan_id": None, "trace_id": run["trace_id"],
            "step_id": upkeep_step_id(part), "step_number": 0, "tool_name": "model",
            "session_id": run_session_id(run),
            "input_hash": canonical_hash({"upkeep": part, "turn": turn}),
            "max_attempts": max(attempts, attempt), "needs_model": needs_model(run.get("profile"))}
    await queue_attempt(conn, base, attempt=attempt, delay_s=delay_s, details={
        "action_id": upkeep_step_id(part), "upkeep": part, "turn": turn})


async def archived(conn: store.Conn, run: store.Row, row: store.Row,
                   details: dict[str, Any], *, outage: Outage | None = None) -> str | None:
    """After an upkeep attempt was archived (in its transaction): the next upkeep step, a
    retry (a wait, in a provider ``outage``), or the run's end. Returns the run's terminal
    state, if it ended."""
    part = row["details"]["upkeep"]
    if row["status"] != "SUCCESS":
        if outage is not None and details.get("provider") and not details.get("final"):
            return await provider_down(conn, run, row, outage)
        return await after_failure(conn, run, row, final=bool(details.get("final")))
    turn = {"thread_id": run["request"]["thread"]["id"], "turn": row["details"]["turn"]}
    if part == "facts":
        memories = list(details.get("memories") or [])
        await conn.execute(Q["set_turn_facts"], {**turn, "facts": Jsonb(memories)})
        await _event(conn, run, "thread_facts", {"turn": turn["turn"], "memories": memories})
        await queue_upkeep(conn, run, "summary")
        return None
    marked = await (await conn.execute(Q["mark_turn_upkept"], turn)).fetchone()
    if marked is not None:
        await conn.execute(Q["set_summary"], {
            "id": turn["thread_id"], "summary": details["summary"],
            "version": details["version"], "summarized_turns": turn["turn"]})
        await _event(conn, run, "thread_summary", {
            "turn": turn["turn"], "version": int(details["version"]) + 1,
            "tokens": len(str(details["summary"]).split())})
    return await end_turn(conn, run)


async def after_failure(conn: store.Conn, run: store.Row, row: store.Row, *,
                        final: bool = False) -> str | None:
    """An upkeep attempt failed (or its worker was lost): try it again, with backoff, up to
    its attempts; then mark the turn and end the run with the agent's answer."""
    part = row["details"]["upkeep"]
    if not final and row["attempt"] < row["max_attempts"]:
        await queue_upkeep(conn, run, part, attempt=row["attempt"] + 1,
                           delay_s=backoff_s(row["attempt"]))
        return None
    await _event(conn, run, "thread_upkeep_failed", {
        "turn": row["details"]["turn"], "step": row["step_id"], "attempts": row["attempt"],
        "error": row["error"]})
    return await end_turn(conn, run)


async def provider_down(conn: store.Conn, run: store.Row, row: store.Row,
                        outage: Outage) -> str | None:
    """The model provider failed the upkeep's call: the run WAITS with the reason and the
    step is tried again later, up to ``outage.attempts`` calls; then the turn is marked
    and its run ends with its answer (:func:`after_failure`)."""
    if row["attempt"] >= outage.attempts:
        return await after_failure(conn, run, row, final=True)
    delay_s = outage.backoff_s(row["attempt"])
    reason = (f"waiting for the model provider for the turn's {row['step_id']} (the answer "
              f"is in; call {row['attempt']} of {outage.attempts} failed: {row['error']}); "
              f"the next try is in {delay_s:.0f} s")
    await queue_upkeep(conn, run, row["details"]["upkeep"], attempt=row["attempt"] + 1,
                       delay_s=delay_s, max_attempts=outage.attempts)
    await store.execute(conn, "wait_for_provider", {"run_id": run["id"], "reason": reason})
    await _event(conn, run, "run_waiting", {
        "reason": reason, "retry_in_s": delay_s, "attempt": row["attempt"],
        "limit": outage.attempts})
    return None


async def end_turn(conn: store.Conn, run: store.Row) -> str:
    """End the run as its agent finished it (the ``agent_finished`` event): its status,
    error and answer."""
    done = await (await conn.execute(Q["agent_finished_of"], {"run_id": run["id"]})).fetchone()
    payload: dict[str, Any] = dict(done["payload"]) if done else {
        "ok": False, "error": "the turn's answer is missing"}
    ok = bool(payload.get("ok"))
    status = "SUCCEEDED" if ok else "FAILED"
    current = await store.fetch_one(conn, "get_run", {"run_id": run["id"]})
    assert current is not None
    await finish_run(conn, current, status, payload.get("error"),
                     answer=payload.get("answer") if ok else None)
    return status


async def _event(conn: store.Conn, run: store.Row, type: str, payload: dict[str, Any]) -> None:
    await store.append_event(conn, run["id"], type, payload, trace_id=run["trace_id"])
