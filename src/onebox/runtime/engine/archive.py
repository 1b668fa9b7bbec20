"""Archiving a step attempt: its row, its events and what follows, in one transaction.

The transaction locks the run row first (so two parallel steps finishing at once
cannot both miss the step that depends on both), then writes the attempt with
its fencing token: a worker whose lease was taken over gets ``LeaseLost`` and
writes nothing. Run row first, then attempts, is the one lock order of every path
(see ``onebox.runtime.engine.queue``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from psycopg import AsyncPipeline
from psycopg.types.json import Jsonb

from onebox.agent.hashing import canonical_hash
from onebox.config import Settings
from onebox.errors import LeaseLost
from onebox.runtime.engine.plans import load_plan_index
from onebox.runtime.engine.schedule import StepState, backoff_s
from onebox.runtime.engine.submit import queue_attempt, queue_ready_steps
from onebox.sandbox.base import ExecResult
from onebox.sandbox.capture import safe_text
from onebox.store import runs as store
from onebox.store.db import Database
from onebox.store.retry import retry_rollbacks

log = logging.getLogger(__name__)

STDIO_TAIL_CHARS = 64_000
MAX_ANSWER_CHARS = 64_000  # runs.answer (its CHECK in migration 0019 says the same)
#: what an archive does next, in its transaction: (conn, run, finished row) -> terminal state
Then = Callable[[store.Conn, store.Row, store.Row], Awaitable[str | None]]
#: what the attempt's workspace commits, in the archive's transaction, after its fenced write
Commit = Callable[[store.Conn, store.Row], Awaitable[object]]
PIPELINE_MAX_BYTES = 256 << 10  # larger results skip the pipeline (see pipeline_if_small)
BIG_LISTING = 500  # files_written entries past which details are serialised in a thread
REQUEST_KEYS = ("code", "language", "limits", "allow_domains", "backend", "isolation")
EVENT_OF_STATUS = {"SUCCESS": "step_succeeded", "FAILED": "step_failed", "TIMEOUT": "step_timed_out"}


@dataclass(frozen=True)
class Outcome:
    """What one attempt produced, ready to be archived."""

    status: str  # SUCCESS | FAILED | TIMEOUT
    exit_code: int | None = None
    output_hash: str | None = None
    duration_ms: float | None = None
    memory_used_mb: float | None = None
    cpu_usage_percent: float | None = None
    stdout: str = ""  # the text view (see onebox.sandbox.capture.text_view), its tail
    stderr: str = ""
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    blocked_network: tuple[dict[str, Any], ...] = ()
    stdout_bytes: bytes | None = None  # the exact bytes, when the text above is not them
    stderr_bytes: bytes | None = None
    # the attempt's change set onto the run's files (onebox.snapshots.history): committed
    # only if its fenced write is (an attempt whose lease was taken over commits nothing)
    commit: Commit | None = field(default=None, compare=False, repr=False)


def output_hash(result: ExecResult) -> str:
    """sha256 of what a step printed and returned: exit code, stdout and stderr bytes.

    Files are not part of it: steps of a run share one workspace, so a workspace diff
    cannot tell which of two parallel steps wrote a file. The files a step leaves are
    covered by its post-execution snapshot (``snapshot_id``, content-addressed).
    """
    return output_hash_of(result.exit_code, result.stdout_raw, result.stderr_raw)


def output_hash_of(exit_code: int | None, stdout: bytes, stderr: bytes) -> str:
    """sha256 over the exit code and the exact bytes printed. A stream that is valid UTF-8
    enters as its text (so hashes of text output are what they always were), any other as
    ``{"base64": ...}``: two different byte strings never hash alike."""
    return canonical_hash({"exit_code": exit_code, "stdout": _hashable(stdout),
                           "stderr": _hashable(stderr)})


def _hashable(data: bytes) -> str | dict[str, str]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def output_bytes(row: store.Row, stream: str) -> bytes:
    """The exact bytes a stored attempt printed on ``stream`` ("stdout" or "stderr")."""
    raw = row.get(f"{stream}_bytes")
    return bytes(raw) if raw is not None else (row.get(stream) or "").encode("utf-8")


def outcome_from_result(result: ExecResult, request_details: dict[str, Any]) -> Outcome:
    status = "TIMEOUT" if result.timed_out else "SUCCESS" if result.ok else "FAILED"
    error = result.error
    if status == "TIMEOUT" and not error:
        error = "the step ran past its timeout and was killed"
    elif status == "FAILED" and not error:
        error = f"exited with status {result.exit_code}"
    return Outcome(
        status=status,
        exit_code=result.exit_code,
        output_hash=output_hash(result) if status == "SUCCESS" else None,
        duration_ms=round(result.duration_ms, 3),
        memory_used_mb=result.memory_peak_mb,
        cpu_usage_percent=result.cpu_percent,
        stdout=_tail(result.stdout),
        stderr=_tail(result.stderr),
        stdout_bytes=_unless_exact(result.stdout_raw),
        stderr_bytes=_unless_exact(result.stderr_raw),
        error=error,
        details={
            **request_details,
            "backend": result.backend, "isolation": result.isolation,
            "enforcement": dict(result.enforcement), "truncated": result.truncated,
            "session_reset": result.session_reset, "cpu_time_ms": result.cpu_time_ms,
            # vars(), not asdict(): 25x cheaper, and a listing has up to 10,000 entries.
            "files_written": [dict(vars(f)) for f in result.files_written],
            "files_truncated": result.files_truncated,
        },
        blocked_network=tuple(asdict(b) for b in result.blocked_network),
    )


def _tail(text: str) -> str:
    return text if len(text) <= STDIO_TAIL_CHARS else text[-STDIO_TAIL_CHARS:]


def _unless_exact(data: bytes) -> bytes | None:
    """The bytes to keep beside the text column: None when that column holds them exactly
    (valid UTF-8, no NUL, not cut to its tail), so the usual output is stored once."""
    if len(data) > STDIO_TAIL_CHARS or b"\0" in data:
        return data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    return None


def archive_failure(outcome: Outcome, exc: BaseException) -> Outcome:
    """The attempt as FAILED because its result could not be written, with the reason; only
    what describes the request is kept (the rest may be what the database refused)."""
    kept = {k: v for k, v in outcome.details.items() if k in REQUEST_KEYS}
    reason = safe_text(f"could not archive: {type(exc).__name__}: {exc}")[:2000]
    return Outcome("FAILED", duration_ms=outcome.duration_ms, error=reason,
                   details={**kept, "archive_error": reason, "archived_status": outcome.status})


def step_params(outcome: Outcome) -> dict[str, Any]:
    """The result columns of ``finish_step``, as PostgreSQL takes them (no NUL in text)."""
    return {
        "status": outcome.status, "exit_code": outcome.exit_code,
        "output_hash": outcome.output_hash, "duration_ms": outcome.duration_ms,
        "memory_used_mb": outcome.memory_used_mb,
        "cpu_usage_percent": outcome.cpu_usage_percent,
        "stdout": safe_text(outcome.stdout), "stderr": safe_text(outcome.stderr),
        "stdout_bytes": outcome.stdout_bytes, "stderr_bytes": outcome.stderr_bytes,
        "error": None if outcome.error is None else safe_text(outcome.error),
        "event_type": EVENT_OF_STATUS[outcome.status],
    }


async def archive_step(
    db: Database, settings: Settings, claimed: store.Row, outcome: Outcome
) -> str | None:
    """Write the attempt's result and advance the run. Returns the run's new terminal state, if any.

    A transaction the database rolls back (deadlock, serialization failure) is written
    again (``onebox.store.retry``): a result is never dropped for a lock conflict.
    """
    async def then(conn: store.Conn, run: store.Row, row: store.Row) -> str | None:
        return await advance(conn, settings, run, row)

    return await archive_attempt(db, claimed, outcome, then)


async def archive_attempt(
    db: Database, claimed: store.Row, outcome: Outcome, then: Then
) -> str | None:
    """The one archive of an attempt, for plan steps and agent actions alike: in one
    transaction, lock the run, write the result if the fencing token is current (else
    LeaseLost), record blocked egress, and unless the run has ended, ``then(conn, run,
    row)`` decides what comes next. A transaction the database rolls back (deadlock,
    serialization failure) is written again (``onebox.store.retry``)."""
    details = await details_json(outcome.details)
    return await retry_rollbacks(
        f"archive of step {claimed['step_id']} attempt {claimed['attempt']} of run "
        f"{claimed['run_id']}", lambda: _archive_once(db, claimed, outcome, details, then))


async def _archive_once(
    db: Database, claimed: store.Row, outcome: Outcome, details: str, then: Then
) -> str | None:
    async with (db.pool.connection() as conn,
                pipeline_if_small(conn, outcome, details) as pipeline, conn.transaction()):
        # BEGIN, the run lock and the fenced write go out together: one round trip.
        run_cur = await conn.execute(store.Q["lock_run_for_archive"], {
            "run_id": claimed["run_id"], "succeeded": int(outcome.status == "SUCCESS")})
        row_cur = await conn.execute(store.Q["finish_step"], {
            "id": claimed["id"], "fencing_token": claimed["fencing_token"],
            **step_params(outcome), "details": Jsonb(outcome.details, dumps=lambda _: details),
        })
        if pipeline is not None:
            await pipeline.sync()
        run, row = await run_cur.fetchone(), await row_cur.fetchone()
        assert run is not None
        if row is None:
            raise LeaseLost(
                f"step {claimed['step_id']} attempt {claimed['attempt']} of run {claimed['run_id']}: "
                f"lease token {claimed['fencing_token']} is stale; another worker owns it now"
            )
        if outcome.commit is not None:
            await outcome.commit(conn, row)
        for blocked in outcome.blocked_network:
            await store.append_event(conn, row["run_id"], "BLOCKED_EXTERNAL_ACCESS", {
                "step_id": row["step_id"], **blocked}, trace_id=row["trace_id"],
                session_id=row["session_id"], execution_id=row["id"])
        if run["status"] in store.TERMINAL_RUN_STATES:
            return None
        return await then(conn, run, row)


async def details_json(details: dict[str, Any]) -> str:
    """The step's details as JSON; a big one (files_written of thousands of files) is
    serialised in a thread, so archiving it does not stall the worker's event loop."""
    if len(details.get("files_written") or ()) > BIG_LISTING:
        return await asyncio.to_thread(json.dumps, details, default=str)
    return json.dumps(details, default=str)


@contextlib.asynccontextmanager
async def pipeline_if_small(
    conn: store.Conn, outcome: Outcome, details_json: str
) -> AsyncIterator[AsyncPipeline | None]:
    """A pipeline for the usual small result; plain statements for a big one.

    psycopg's async pipeline stalls for good when one statement's parameters are a few
    MB (seen with 3 MB: client and server both wait to read), and a step's details can
    be that big (files_written of 20,000 files). One more round trip is the price.
    """
    size = len(outcome.stdout or "") + len(outcome.stderr or "") + len(details_json) \
        + len(outcome.stdout_bytes or b"") + len(outcome.stderr_bytes or b"")
    if size > PIPELINE_MAX_BYTES:
        yield None
        return
    async with conn.pipeline() as pipeline:
        yield pipeline


def step_payload(row: store.Row) -> dict[str, Any]:
    """The finished attempt as event data: enough to rebuild the row from the log."""
    return {
        "execution_id": str(row["id"]), "step_id": row["step_id"], "attempt": row["attempt"],
        "status": row["status"], "exit_code": row["exit_code"], "output_hash": row["output_hash"],
        "duration_ms": row["duration_ms"], "memory_used_mb": row["memory_used_mb"],
        "cpu_usage_percent": row["cpu_usage_percent"], "error": row["error"],
    }


async def advance(
    conn: store.Conn, settings: Settings, run: store.Row, row: store.Row, *, backoff: bool = True
) -> str | None:
    """After an attempt: queue what became ready, retry, or finish the run.

    ``backoff=False`` retries at once: used when the worker was lost, not the code.
    """
    trace_id = run["trace_id"]
    if row["status"] == "SUCCESS":
        if run["steps_left"] is not None and run["steps_left"] <= 0:
            await finish_run(conn, run, "SUCCEEDED", None)
            return "SUCCEEDED"
        index = await load_plan_index(conn, row["plan_id"])
        after, needed = index.around(row["step_id"])
        if after:
            latest = await store.fetch_all(conn, "latest_attempts_of", {
                "run_id": run["id"], "step_ids": list(needed)})
            states = {r["step_id"]: StepState(r["status"], r["attempt"], r["output_hash"])
                      for r in latest}
            await queue_ready_steps(conn, settings, run["id"], trace_id, row["plan_id"], index,
                                    states, candidates=after)
        return None
    if row["attempt"] < row["max_attempts"]:
        await queue_attempt(conn, _retry_base(row, trace_id), attempt=row["attempt"] + 1,
                            delay_s=backoff_s(row["attempt"]) if backoff else 0.0)
        return None
    reason = (f"step {row['step_id']} failed after {row['attempt']} attempt(s): "
              f"{row['error'] or row['status']}")
    await finish_run(conn, run, "DEAD", reason)
    return "DEAD"


def _retry_base(row: store.Row, trace_id: str) -> dict[str, Any]:
    return {k: row[k] for k in ("run_id", "plan_id", "step_id", "step_number", "tool_name",
                                "input_hash", "max_attempts")} | {"trace_id": trace_id}


async def finish_run(conn: store.Conn, run: store.Row, status: str, error: str | None,
                     *, answer: str | None = None) -> bool:
    """Move the run to a terminal state (once), with its answer if it has one, and drop its
    queued attempts."""
    answer = stored_answer(answer)
    done = await store.fetch_one(conn, "finish_run", {
        "run_id": run["id"], "status": status, "error": error, "answer": answer})
    if done is None:
        return False
    for pending in await store.fetch_all(conn, "cancel_pending_steps", {
            "run_id": run["id"], "error": f"run is {status}"}):
        await store.append_event(conn, run["id"], "step_failed", {
            "execution_id": str(pending["id"]), "step_id": pending["step_id"],
            "attempt": pending["attempt"], "status": "FAILED", "error": f"run is {status}",
        }, trace_id=run["trace_id"], execution_id=pending["id"])
    await store.append_event(conn, run["id"], f"run_{status.lower()}", {
        "status": status, "error": error, **({"answer": answer} if answer else {})},
        trace_id=run["trace_id"])
    return True


def stored_answer(answer: str | None) -> str | None:
    """The answer as ``runs.answer`` takes it: NUL-free, at most ``MAX_ANSWER_CHARS`` (a
    longer one keeps its head and says where it was cut); None for none or blank."""
    if answer is None or not answer.strip():
        return None
    text = safe_text(answer)
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    note = f"\n[answer cut: the first {MAX_ANSWER_CHARS} of its {len(text)} characters kept]"
    return text[:MAX_ANSWER_CHARS - len(note)] + note
