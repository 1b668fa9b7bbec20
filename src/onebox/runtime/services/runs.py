"""Reading runs back, and changing them from outside a worker (cancel)."""

from __future__ import annotations

import uuid
from typing import Any, NoReturn

from psycopg.types.json import Jsonb

from onebox.agent.actions import StepResult
from onebox.agent.hashing import canonical_hash
from onebox.config import Settings
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.runtime.agent.engine import is_agent_row, is_agent_run, observe, retry_waiting
from onebox.runtime.engine.archive import advance, finish_run, step_payload
from onebox.runtime.engine.event_log import run_events as run_events  # reading runs back
from onebox.runtime.engine.submit import queue_attempt
from onebox.store import runs as store
from onebox.store.db import Database
from onebox.store.ids import IdKind, ids_between
from onebox.store.retry import retry_rollbacks
from onebox.suggest import did_you_mean

PAGE_STEPS = 100  # step attempts per page of `onebox show` and the run API
MAX_FAILED_LISTED = 20  # failed steps named in a run's summary
MIN_PREFIX_CHARS = 4  # as git: shorter prefixes match too much to be worth a lookup
MAX_CANDIDATES = 10  # an ambiguous prefix lists at most this many ids
SHORT_ID_DIGITS = 8  # a narrow table's ids: at least this many, more where two ids share them
_LISTED_BY = {"run": "`onebox runs`", "execution": "`onebox show RUN` (--json: steps[].id)",
              "thread": "`onebox thread list`"}


async def resolve_id(
    db: Database, text: str, *, kind: IdKind = "run", tenant_id: str | None = None
) -> uuid.UUID:
    """A whole run (or step execution) id, or the one id that starts with ``text``.

    As git does with commits: an ambiguous prefix is refused with the candidates listed, a
    prefix nothing starts with is NotFound. A whole id is returned as is (not looked up).
    """
    field = f"{kind}_id"
    try:
        return uuid.UUID(text)
    except ValueError:
        lo, hi = prefix_range(text, kind)
    async with db.connection() as conn:
        found = await ids_between(conn, kind, lo, hi, tenant_id=tenant_id,
                                  limit=MAX_CANDIDATES + 1)
    if not found:
        raise NotFound(f"no {kind} id starts with '{text}': that {kind} does not exist; "
                       f"{_LISTED_BY[kind]} lists them", field=field)
    if len(found) > 1:
        listed = ", ".join(str(i) for i in found[:MAX_CANDIDATES])
        more = " and more" if len(found) > MAX_CANDIDATES else ""
        raise ValidationError(f"{kind} id prefix '{text}' is ambiguous: it matches {listed}{more}; "
                              "give more characters", field=field)
    return found[0]


async def short_ids(db: Database, ids: list[uuid.UUID], *, kind: IdKind = "run",
                    tenant_id: str | None = None) -> dict[uuid.UUID, str]:
    """Each id cut to its shortest prefix of at least ``SHORT_ID_DIGITS`` hex digits that no
    other id of ``kind`` starts with (git's short hashes): what a narrow table prints, and
    what every command taking an id accepts."""
    short: dict[uuid.UUID, str] = {}
    async with db.connection() as conn:
        for whole in ids:
            for digits in range(SHORT_ID_DIGITS, 32, 4):
                lo, hi = prefix_range(whole.hex[:digits], kind)
                if len(await ids_between(conn, kind, lo, hi, tenant_id=tenant_id,
                                         limit=2)) <= 1:
                    short[whole] = _first_digits(str(whole), digits)
                    break
            else:
                short[whole] = str(whole)
    return short


def _first_digits(text: str, digits: int) -> str:
    """``text`` (an id with dashes) up to its ``digits``-th hex digit."""
    seen = 0
    for i, char in enumerate(text):
        seen += char != "-"
        if seen == digits:
            return text[:i + 1]
    return text


def prefix_range(text: str, kind: IdKind = "run") -> tuple[uuid.UUID, uuid.UUID]:
    """The smallest and largest UUID starting with the hex prefix ``text`` (dashes ignored)."""
    digits = text.strip().lower().replace("-", "")
    if len(digits) < MIN_PREFIX_CHARS or len(digits) > 32 or \
            any(c not in "0123456789abcdef" for c in digits):
        raise ValidationError(
            f"'{text}' is not a {kind} id; give the whole id or a unique prefix of at least "
            f"{MIN_PREFIX_CHARS} hex characters, as printed by {_LISTED_BY[kind]}",
            field=f"{kind}_id")
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


async def get_run(db: Database, run_id: uuid.UUID) -> store.Row:
    async with db.connection() as conn:
        run = await store.fetch_one(conn, "get_run", {"run_id": run_id})
    if run is None:
        raise NotFound(f"run {run_id} does not exist; `onebox runs` lists the recent ones",
                       field="run_id")
    return run


async def list_runs(
    db: Database,
    *,
    status: str | None = None,
    limit: int = 20,
    tenant_id: str | None = None,
    stale: bool = False,
) -> list[store.Row]:
    """Recent runs, newest first; ``stale`` keeps runs the watchdog flagged as silent."""
    async with db.connection() as conn:
        return await store.fetch_all(conn, "list_runs", {
            "status": status, "limit": limit, "tenant_id": tenant_id, "stale_only": stale})


async def run_steps(db: Database, run_id: uuid.UUID) -> list[store.Row]:
    async with db.connection() as conn:
        return await store.fetch_all(conn, "run_steps", {"run_id": run_id})


async def run_timeline(
    db: Database, run_id: uuid.UUID, *, limit: int | None = PAGE_STEPS, after: str | None = None,
) -> dict[str, Any]:
    """The run, its summary and one page of step attempts: what `onebox show` prints.

    ``limit=None`` returns every attempt; ``next`` is the cursor of the following page
    (None on the last one).
    """
    run = await get_run(db, run_id)
    page = await steps_page(db, run_id, limit=limit, after=after)
    return {"run": run, "summary": await run_summary(db, run_id), **page}


async def run_summary(db: Database, run_id: uuid.UUID) -> dict[str, Any]:
    """Steps per state (by latest attempt), attempts in all, and the failed steps: SQL
    aggregates, whatever the size of the run."""
    async with db.connection() as conn:
        counts = await store.fetch_all(conn, "run_step_counts", {"run_id": run_id})
        total = await store.fetch_one(conn, "run_attempt_count", {"run_id": run_id})
        failed = await store.fetch_all(conn, "run_failed_steps", {
            "run_id": run_id, "limit": MAX_FAILED_LISTED})
        merged = await store.fetch_all(conn, "run_overwrites", {"run_id": run_id})
    return {"steps": {r["status"]: int(r["steps"]) for r in counts},
            "attempts": int(total["attempts"]) if total else 0,
            "failed": [{"step_id": r["step_id"], "attempt": r["attempt"], "status": r["status"],
                        "error": r["error"], "execution_id": r["id"]} for r in failed],
            "overwrites": _overwrites(merged)}


def _overwrites(merged: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each path two independent steps changed, once, with the step whose version was kept."""
    seen: dict[str, dict[str, str]] = {}
    for event in merged:
        for o in (event["payload"] or {}).get("overwrites") or []:
            if isinstance(o, dict) and "path" in o:
                seen[str(o["path"])] = {k: str(o.get(k)) for k in ("path", "kept", "lost")}
    return [seen[p] for p in sorted(seen)][:MAX_FAILED_LISTED]


async def steps_page(
    db: Database, run_id: uuid.UUID, *, limit: int | None = PAGE_STEPS, after: str | None = None,
) -> dict[str, Any]:
    """Attempts by step number, in time order within one, after the cursor ``after``, at
    most ``limit``."""
    number, attempt = parse_cursor(after)
    async with db.connection() as conn:
        rows = await store.fetch_all(conn, "run_steps_page", {
            "run_id": run_id, "after_number": number, "after_attempt": attempt,
            "limit": None if limit is None else limit + 1})
    more = limit is not None and len(rows) > limit
    rows = rows[:limit] if more else rows
    places = [row.pop("place") for row in rows]
    return {"steps": rows, "next": f"{rows[-1]['step_number']}.{places[-1]}" if more else None}


def parse_cursor(text: str | None) -> tuple[int, int]:
    if text is None or text == "":
        return -1, 0
    number, _, attempt = text.strip().partition(".")
    if not (number.isascii() and number.isdigit() and attempt.isascii() and attempt.isdigit()
            and len(number) <= 9 and len(attempt) <= 9):
        raise ValidationError(f"page cursor {text!r} is not one this service gave out; pass "
                              "the 'next' value of the previous page as is (e.g. 12.1)",
                              field="after")
    return int(number), int(attempt)


async def cancel_run(db: Database, run_id: uuid.UUID, *, reason: str = "cancelled by user") -> None:
    """Cancel a run: queued steps are dropped, running ones are stopped by their workers.

    The run row is locked before its attempts (the lock order of ``onebox.runtime.engine.queue``);
    a rollback by the database (deadlock, serialization failure) is retried.
    """
    await retry_rollbacks(f"cancel of run {run_id}", lambda: _cancel_once(db, run_id, reason))


async def _cancel_once(db: Database, run_id: uuid.UUID, reason: str) -> None:
    async with db.transaction() as conn:
        run = await _lock_run(conn, run_id)
        if run["status"] in store.TERMINAL_RUN_STATES:
            raise Conflict(f"run {run_id} is already {run['status']}; only unfinished runs can be "
                           "cancelled", field="run_id")
        await finish_run(conn, run, "CANCELLED", reason)


async def approve_step(
    db: Database,
    settings: Settings,
    run_id: uuid.UUID,
    step_id: str,
    *,
    approve: bool,
    by: str,
    comment: str | None = None,
) -> str:
    """Decide a waiting approval step; the run resumes (or fails, when rejected).

    Returns the run's status afterwards.
    """
    async with db.transaction() as conn:
        run = await store.fetch_one(conn, "lock_run_for_archive", {
            "run_id": run_id, "succeeded": int(approve)})
        if run is None:
            raise NotFound(f"run {run_id} does not exist", field="run_id")
        waiting = await store.fetch_one(conn, "waiting_approval", {"run_id": run_id, "step_id": step_id})
        if waiting is None:
            await _refuse_decision(conn, run, step_id)
        decision = {"approved": approve, "by": by, "comment": comment}
        row = await _decide(conn, run, waiting, decision)
        still_waiting = await _resume_when_none_open(conn, run_id)
        if is_agent_row(waiting):  # the agent decides what the answer means
            terminal = await observe(conn, run, row["id"], StepResult(
                waiting["details"]["action_id"], ok=approve, error=row["error"],
                result=decision))
        elif not approve:
            await finish_run(conn, run, "FAILED", row["error"])
            return "FAILED"
        else:
            terminal = await advance(conn, settings, run, row)
        return terminal or ("WAITING" if still_waiting else "RUNNING")


async def _refuse_decision(conn: store.Conn, run: store.Row, step_id: str) -> NoReturn:
    """No approval waits under ``step_id``: say whether the step does not exist (with the
    name it is probably a typo of) or exists and is not waiting."""
    names = [r["step_id"] for r in await store.fetch_all(conn, "run_step_names",
                                                          {"run_id": run["id"]})]
    if step_id not in names:
        hint = did_you_mean(step_id, names) or (
            f"; its steps are {', '.join(sorted(names)[:MAX_CANDIDATES])}" if names
            else "; it has no steps yet")
        raise NotFound(f"run {run['id']} has no such step '{step_id}'{hint} "
                       f"(`onebox show {run['id']}` lists them)", field="step_id")
    raise Conflict(f"step {step_id} of run {run['id']} is not waiting for an approval "
                   f"(the run is {run['status']})", field="step_id")


async def _decide(conn: store.Conn, run: store.Row, waiting: store.Row,
                  decision: dict[str, Any]) -> store.Row:
    """Record the decision on the waiting approval's row, with its events."""
    approve, by, comment = decision["approved"], decision["by"], decision["comment"]
    row = await store.fetch_one(conn, "decide_approval", {
        "id": waiting["id"], "status": "SUCCESS" if approve else "FAILED",
        "output_hash": canonical_hash(decision) if approve else None,
        "error": None if approve else f"rejected by {by}" + (f": {comment}" if comment else ""),
        "stdout": "approved" if approve else "rejected", "details": Jsonb(decision),
    })
    assert row is not None
    ids = {"trace_id": run["trace_id"], "execution_id": row["id"]}
    await store.append_event(conn, run["id"], "approval_granted" if approve else "approval_rejected",
                             {"step_id": waiting["step_id"], **decision}, **ids)
    await store.append_event(conn, run["id"], "step_succeeded" if approve else "step_failed",
                             step_payload(row), **ids)
    return row


async def _resume_when_none_open(conn: store.Conn, run_id: uuid.UUID) -> bool:
    """The run RUNS again once no approval of it is open; whether one still is."""
    open_left = await store.fetch_one(conn, "open_approvals", {"run_id": run_id})
    if open_left is not None and open_left["n"] == 0:
        await store.execute(conn, "set_run_status", {
            "run_id": run_id, "status": "RUNNING", "from_states": ["WAITING"]})
    return bool(open_left and open_left["n"])


async def retry_run(db: Database, settings: Settings, run_id: uuid.UUID) -> list[str]:
    """Give a DEAD or FAILED run another round: every step whose last attempt failed is
    queued again (for an agent run: each action the agent still waits for, e.g. the model
    call a provider outage ended the run on).

    Returns the ids of the steps queued.
    """
    async with db.transaction() as conn:
        run = await _lock_run(conn, run_id)
        # a plan file's FAILED run was rejected by a person: that decision stands
        states = ["DEAD", "FAILED"] if is_agent_run(run) else ["DEAD"]
        if await store.fetch_one(conn, "reopen_run", {"run_id": run_id,
                                                      "from_states": states}) is None:
            raise Conflict(f"run {run_id} is {run['status']}; only {' or '.join(states)} runs "
                           "can be retried", field="run_id")
        await store.append_event(conn, run_id, "run_retried", {"previous_error": run["error"]},
                                 trace_id=run["trace_id"])
        if is_agent_run(run):
            return await _retry_agent(conn, settings, run)
        latest = await store.fetch_all(conn, "latest_attempts", {"run_id": run_id})
        steps = {r["id"]: r for r in await store.fetch_all(conn, "run_steps", {"run_id": run_id})}
        queued = []
        for last in latest:
            if last["status"] in ("FAILED", "TIMEOUT"):
                row = steps[last["id"]]
                base = {k: row[k] for k in ("run_id", "plan_id", "step_id", "step_number",
                                            "tool_name", "input_hash")}
                base |= {"trace_id": run["trace_id"],
                         "max_attempts": row["attempt"] + settings.runtime.max_attempts}
                await queue_attempt(conn, base, attempt=row["attempt"] + 1, delay_s=0.0)
                queued.append(row["step_id"])
        return queued


async def _retry_agent(conn: store.Conn, settings: Settings, run: store.Row) -> list[str]:
    queued = await retry_waiting(conn, run, extra_attempts=settings.runtime.max_attempts)
    if not queued:
        raise Conflict(f"run {run['id']}: the agent ended it itself ({run['error']}), so no "
                       "action is left to retry; submit the task again", field="run_id")
    return queued


async def _lock_run(conn: store.Conn, run_id: uuid.UUID) -> store.Row:
    run = await store.fetch_one(conn, "lock_run", {"run_id": run_id})
    if run is None:
        raise NotFound(f"run {run_id} does not exist; `onebox runs` lists the recent ones",
                       field="run_id")
    return run
