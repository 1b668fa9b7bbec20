"""Chaos for big runs: a worker is killed (SIGKILL) in the middle of a 400-step fan-out;
another worker finishes the run, and every step succeeds exactly once.

Each step writes its id to its own file under ledger/ (parallel steps writing one file would
keep only the one later in the plan: docs/runtime.md); the join prints them all. A step may
run twice only if it was in flight when its worker died, and then it has a second attempt on
record.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

from test_chaos import rt, start_worker, wait_until  # noqa: F401  (rt is a fixture)

from onebox.agent.plan import parse_plan
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.service import Runtime

N_WIDE = 400  # wide enough that the kill lands mid-fan-out with hundreds still queued
PLAN = parse_plan({"steps": [
    *({"id": f"w{i}", "tool": "bash", "code": f"mkdir -p ledger; echo w{i} >> ledger/w{i}"}
      for i in range(N_WIDE)),
    {"id": "join", "tool": "bash", "code": "cat ledger/*",
     "depends_on": [f"w{i}" for i in range(N_WIDE)]},
]})


async def count(rt: Runtime, run_id: object, status: str) -> int:  # noqa: F811
    row = await rt.db.fetchone("SELECT count(*) AS n FROM onebox.task_execution "
                               "WHERE run_id = %(id)s AND status = %(s)s",
                               {"id": run_id, "s": status})
    return int(row["n"]) if row else 0


async def test_kill_9_during_a_wide_run_and_another_finishes(rt: Runtime, tmp_path: Path) -> None:  # noqa: F811
    submitted = await rt.submit(PLAN)
    run_id = submitted.run_id
    victim = start_worker(rt, tmp_path / "marker")
    try:
        async def some_done_some_running() -> bool:
            return await count(rt, run_id, "SUCCESS") >= 50 and \
                await count(rt, run_id, "RUNNING") > 0

        await wait_until(some_done_some_running, timeout_s=120)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        if victim.poll() is None:
            victim.kill()
    final = await asyncio.wait_for(rt.drive(run_id), 600)
    steps = await runs_api.run_steps(rt.db, run_id)
    assert final["status"] == "SUCCEEDED", final["error"]
    successes = Counter(s["step_id"] for s in steps if s["status"] == "SUCCESS")
    assert set(successes) == {s.id for s in PLAN.steps}
    assert set(successes.values()) == {1}, "a step succeeded twice"
    tries = Counter(s["step_id"] for s in steps)
    ledger = Counter(next(s for s in steps if s["step_id"] == "join")["stdout"].split())
    assert set(ledger) == {f"w{i}" for i in range(N_WIDE)}
    assert all(tries[step] >= n for step, n in ledger.items()), \
        "a step ran again without a new attempt on record"
