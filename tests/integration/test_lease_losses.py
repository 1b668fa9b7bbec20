"""A lost worker is not the step's failure: an attempt whose lease expired does not count
against the step's max_attempts (up to runtime.max_lease_losses losses of the step), so a
kill storm does not fail runs whose steps never failed on their own."""

from __future__ import annotations

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.runtime.engine.queue import claim_steps, sweep_expired
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.submission import submit_plan
from onebox.store.db import Database

PLAN = {"name": "lost-workers", "steps": [{"id": "s1", "tool": "bash", "code": "echo hi"}]}


async def _lose_the_worker(db: Database, settings: Settings) -> None:
    """A worker claims the attempt and vanishes: its lease runs out, the sweep recovers it."""
    claimed = await claim_steps(db, settings, "ghost", 1)
    assert [r["step_id"] for r in claimed] == ["s1"]
    async with db.transaction() as conn:
        await conn.execute("UPDATE onebox.task_execution SET lease_expires_at = now() - "
                           "interval '1 second' WHERE id = %s", (claimed[0]["id"],))
    assert await sweep_expired(db, settings) == 1


async def test_lost_workers_do_not_use_up_a_steps_attempts(db: Database,
                                                           settings: Settings) -> None:
    settings.runtime.max_attempts, settings.runtime.max_lease_losses = 1, 2
    run = (await submit_plan(db, settings, parse_plan(PLAN))).run_id
    for lost in (1, 2):
        await _lose_the_worker(db, settings)
        assert (await runs_api.get_run(db, run))["status"] != "DEAD", f"after loss {lost}"
        steps = await runs_api.run_steps(db, run)
        assert [s["attempt"] for s in steps if s["status"] == "PENDING"] == [lost + 1]
    await _lose_the_worker(db, settings)  # a third loss: past the bound, it counts
    dead = await runs_api.get_run(db, run)
    assert dead["status"] == "DEAD" and "lease expired" in dead["error"], dead["error"]
