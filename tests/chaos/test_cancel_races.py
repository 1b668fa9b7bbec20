"""Cancel versus claim (and archive) on the real database: wide runs cancelled while
several workers claim their steps and report results.

No DeadlockDetected may escape any side, every run ends CANCELLED (or finished), no attempt
is left RUNNING without a lease owner, and no attempt whose result was reported is
rewritten to "lease expired".
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field

import psycopg

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.errors import Conflict, LeaseLost
from onebox.runtime.engine.archive import Outcome, archive_step
from onebox.runtime.engine.queue import claim_steps, sweep_expired
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.store.db import Database

RUNS = 200  # claim/cancel pairs
STEPS_PER_RUN = 24  # parallel steps of each wide run
CLAIMERS = 4
CLAIM_LIMIT = 6


@dataclass
class Race:
    submitted: list[uuid.UUID] = field(default_factory=list)
    reported: dict[uuid.UUID, tuple[str, str]] = field(default_factory=dict)  # id -> (stdout, hash)
    escaped: list[tuple[str, BaseException]] = field(default_factory=list)
    submitting_done: bool = False
    cancelling_done: bool = False


def wide_plan(width: int) -> dict:
    return {"steps": [{"id": f"s{i}", "tool": "bash", "code": f"echo {i}"} for i in range(width)]}


async def _submit_all(db: Database, settings: Settings, race: Race) -> None:
    plan = parse_plan(wide_plan(STEPS_PER_RUN))
    for _ in range(RUNS):
        race.submitted.append((await submit_plan(db, settings, plan)).run_id)
        await asyncio.sleep(0)
    race.submitting_done = True


async def _cancel_all(db: Database, race: Race, seed: int) -> None:
    """Cancel every run, some while still PENDING, some once workers hold its steps."""
    rng = random.Random(seed)
    done = 0
    while done < RUNS:
        if done >= len(race.submitted):
            await asyncio.sleep(0.001)
            continue
        await asyncio.sleep(rng.choice((0, 0, 0.001, 0.003)))
        try:
            await runs_api.cancel_run(db, race.submitted[done])
        except Conflict:
            pass  # every step already finished: the run SUCCEEDED first
        except Exception as exc:  # noqa: BLE001 - what escapes is the finding
            race.escaped.append(("cancel", exc))
        done += 1
    race.cancelling_done = True


async def _claim_and_report(db: Database, settings: Settings, race: Race, owner: str) -> None:
    """Claim steps across runs and report each result, as a worker does."""
    while True:
        try:
            claimed = await claim_steps(db, settings, owner, CLAIM_LIMIT)
        except Exception as exc:  # noqa: BLE001
            race.escaped.append(("claim", exc))
            claimed = []
        for row in claimed:
            stdout, digest = f"result of {row['id']}\n", f"{row['id'].int:064x}"
            try:
                await archive_step(db, settings, row, Outcome(
                    "SUCCESS", exit_code=0, output_hash=digest, stdout=stdout))
                race.reported[row["id"]] = (stdout, digest)
            except (LeaseLost, psycopg.Error) as exc:
                race.escaped.append(("archive", exc))
        if not claimed:
            if race.submitting_done and race.cancelling_done:
                return
            await asyncio.sleep(0.002)


async def _sweep(db: Database, settings: Settings, race: Race) -> None:
    """Lease recovery runs beside, as in every worker's heartbeat (leases here never expire)."""
    while not (race.submitting_done and race.cancelling_done):
        try:
            await sweep_expired(db, settings)
        except Exception as exc:  # noqa: BLE001
            race.escaped.append(("sweep", exc))
        await asyncio.sleep(0.01)


async def test_cancel_wide_runs_while_workers_claim(db: Database, settings: Settings) -> None:
    settings.runtime.lease_s = 600.0
    race = Race()
    await asyncio.gather(
        _submit_all(db, settings, race), _cancel_all(db, race, seed=12),
        _sweep(db, settings, race),
        *(_claim_and_report(db, settings, race, f"worker-{i}") for i in range(CLAIMERS)))
    assert [f"{side}: {type(e).__name__}" for side, e in race.escaped] == []
    statuses = await db.fetch(
        "SELECT status, count(*) AS n FROM onebox.runs GROUP BY status", ())
    assert {r["status"] for r in statuses} <= {"CANCELLED", "SUCCEEDED"}, statuses
    assert sum(r["n"] for r in statuses) == RUNS
    stuck = await db.fetch(
        "SELECT id FROM onebox.task_execution WHERE status IN ('RUNNING', 'PENDING')", ())
    assert stuck == []
    rows = await db.fetch(
        "SELECT id, status, stdout, output_hash, error FROM onebox.task_execution"
        " WHERE id = ANY(%s)",
        (list(race.reported),))
    assert len(rows) == len(race.reported) > 0
    for row in rows:
        assert (row["status"], row["stdout"], row["output_hash"], row["error"]) == (
            "SUCCESS", *race.reported[row["id"]], None), row
    expired = await db.fetch(
        "SELECT id FROM onebox.task_execution WHERE error LIKE 'lease expired%%'", ())
    assert expired == []


async def test_results_reported_after_a_cancel_keep_their_status_and_output(
    db: Database, settings: Settings
) -> None:
    """Steps that finish after their run was cancelled keep their real result and event."""
    settings.runtime.lease_s = 600.0
    run_id = (await submit_plan(db, settings, parse_plan(wide_plan(3)))).run_id
    ok, failed, running = await claim_steps(db, settings, "worker-A", 3, run_id=run_id)
    await runs_api.cancel_run(db, run_id)
    await archive_step(db, settings, ok, Outcome(
        "SUCCESS", exit_code=0, output_hash="a" * 64, stdout="42\n"))
    await archive_step(db, settings, failed, Outcome(
        "FAILED", exit_code=3, stderr="boom\n", error="exited with status 3"))
    assert await sweep_expired(db, settings) == 0
    rows = {r["id"]: r for r in await runs_api.run_steps(db, run_id)}
    assert [(rows[ok["id"]][k]) for k in ("status", "stdout", "output_hash", "exit_code")] == [
        "SUCCESS", "42\n", "a" * 64, 0]
    assert [(rows[failed["id"]][k]) for k in ("status", "stderr", "exit_code", "error")] == [
        "FAILED", "boom\n", 3, "exited with status 3"]
    assert rows[running["id"]]["status"] == "RUNNING"  # its worker stops it at the next beat
    assert len(rows) == 3  # a cancelled run queues no retry of the failed step
    events = {e["execution_id"]: e for e in await runs_api.run_events(db, run_id)
              if e["type"] in ("step_succeeded", "step_failed")}
    assert events[ok["id"]]["payload"]["output_hash"] == "a" * 64
    assert events[failed["id"]]["payload"]["exit_code"] == 3
    assert (await runs_api.get_run(db, run_id))["status"] == "CANCELLED"
