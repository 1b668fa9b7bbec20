"""Chaos: kill -9 a worker at every point of a step's life, pause one past its lease, restart
PostgreSQL mid-run. Another worker must finish the run; no SUCCESS step runs twice; only the
step in flight may run again, recorded as a new attempt.

Each step appends its id to ledger.txt in the run's workspace (a side effect outside the
database); the last step prints the ledger, so duplicates can be counted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database

WORKER = Path(__file__).with_name("chaos_worker.py")
PLAN = parse_plan({"steps": [
    {"id": "s1", "tool": "bash", "code": "echo s1 >> ledger.txt"},
    {"id": "s2", "tool": "bash", "code": "echo s2 >> ledger.txt; sleep 1.5",
     "depends_on": ["s1"]},
    {"id": "s3", "tool": "bash", "code": "echo s3 >> ledger.txt", "depends_on": ["s2"]},
    {"id": "s4", "tool": "bash", "code": "echo s4 >> ledger.txt; cat ledger.txt",
     "depends_on": ["s3"]},
]})


@pytest.fixture
async def rt(db: Database, settings: Settings) -> AsyncIterator[Runtime]:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    settings.runtime.heartbeat_s = 0.2
    settings.runtime.lease_s = 4.0
    backend = get_backend(settings)
    yield Runtime(settings, db, backend)
    await backend.close()


def start_worker(rt: Runtime, marker: Path, *pause: str,
                 home: Path | None = None) -> subprocess.Popen[str]:
    """A worker process on this host (rt's home), or on another one (``home``, sharing the
    object store)."""
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "objects").symlink_to(rt.settings.objects_dir)
    env = {**os.environ, "ONEBOX_HOME": str(home or rt.settings.home),
           "ONEBOX_DATABASE_URL": rt.db.url,
           "ONEBOX_RUNTIME__LEASE_S": "4", "ONEBOX_RUNTIME__HEARTBEAT_S": "0.2",
           "ONEBOX_RUNTIME__POLL_S": "0.1"}
    return subprocess.Popen([sys.executable, str(WORKER), "--marker", str(marker), *pause],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def wait_until(predicate, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached in time")


async def finish_elsewhere(rt: Runtime, run_id) -> tuple[dict, list[dict], Counter[str]]:  # type: ignore[no-untyped-def]
    final = await asyncio.wait_for(rt.drive(run_id), 60)
    steps = await runs_api.run_steps(rt.db, run_id)
    assert final["status"] == "SUCCEEDED", [(s["step_id"], s["attempt"], s["status"], s["error"],
                                             s["stderr"]) for s in steps]
    ledger = Counter(next(s for s in steps if s["step_id"] == "s4"
                          and s["status"] == "SUCCESS")["stdout"].split())
    return final, steps, ledger


def attempts(steps: list[dict], step_id: str) -> list[tuple[int, str]]:
    return [(s["attempt"], s["status"]) for s in steps if s["step_id"] == step_id]


@pytest.mark.parametrize("point", ["after_claim", "during_exec", "before_archive", "after_archive"])
async def test_kill_9_worker_and_another_finishes(rt: Runtime, tmp_path: Path, point: str) -> None:
    sub = await rt.submit(PLAN)
    marker = tmp_path / "marker"
    # One step at a time: with two slots the worker may claim s3 while it archives s2,
    # and a claimed s3 legitimately gets a second attempt after the kill.
    pause = () if point == "during_exec" else ("--pause-at", point, "--step", "s2",
                                               "--concurrency", "1")
    proc = start_worker(rt, marker, *pause)
    try:
        if point == "during_exec":
            ledger = rt.backend.workspace(f"run-{sub.run_id}") / "ledger.txt"

            async def s2_running() -> bool:
                return ledger.exists() and "s2" in ledger.read_text()
            await wait_until(s2_running)
        else:
            async def paused() -> bool:
                return marker.exists() and marker.read_text().strip() == point
            await wait_until(paused)
        killed_at = time.monotonic()
        proc.kill()
        proc.wait(10)
        final, steps, ledger = await finish_elsewhere(rt, sub.run_id)
        recovery_s = time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
    assert final["status"] == "SUCCEEDED", (final["error"], proc.stderr.read() if proc.stderr else "")
    assert ledger["s1"] == 1 and ledger["s3"] == 1 and ledger["s4"] == 1
    # a lost attempt's writes are never part of the run's files (docs/runtime.md): s2's second
    # attempt starts from s1's files, whatever its first attempt wrote before its worker died
    assert ledger["s2"] == 1
    for step_id in ("s1", "s3", "s4"):
        assert attempts(steps, step_id) == [(1, "SUCCESS")]
    if point == "after_archive":
        assert attempts(steps, "s2") == [(1, "SUCCESS")]
    else:
        assert attempts(steps, "s2") == [(1, "FAILED"), (2, "SUCCESS")]
        lost = next(s for s in steps if s["step_id"] == "s2" and s["attempt"] == 1)
        assert "lease expired" in lost["error"]
    assert recovery_s < 60


async def test_paused_worker_past_its_lease_cannot_write(rt: Runtime, tmp_path: Path) -> None:
    """The paused worker is on another host: on its own host it would hold the run's copy
    until it wakes or dies (steps of one run take turns on a host's copy, docs/runtime.md)."""
    sub = await rt.submit(PLAN)
    rt.settings.objects_dir.mkdir(parents=True, exist_ok=True)
    proc = start_worker(rt, tmp_path / "marker", home=tmp_path / "other-host" / "home")
    try:
        async def s2_running() -> bool:
            return any(s["step_id"] == "s2" and s["status"] == "RUNNING"
                       for s in await runs_api.run_steps(rt.db, sub.run_id))
        await wait_until(s2_running)
        proc.send_signal(signal.SIGSTOP)
        final, steps, ledger = await finish_elsewhere(rt, sub.run_id)
        proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(2.0)  # the old worker wakes, its s2 attempt ends, its write is refused
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert final["status"] == "SUCCEEDED"
    after = await runs_api.run_steps(rt.db, sub.run_id)
    assert attempts(after, "s2") == [(1, "FAILED"), (2, "SUCCESS")]
    assert "lease expired" in next(s for s in after if s["attempt"] == 1 and s["step_id"] == "s2")["error"]
    assert "stale" in err, err[-2000:]
    assert [(s["step_id"], s["status"]) for s in after] == [(s["step_id"], s["status"]) for s in steps]


async def test_postgres_restart_mid_run(rt: Runtime, onebox_home: Path) -> None:
    if os.environ.get("ONEBOX_TEST_DATABASE_URL"):
        pytest.skip("restarts the embedded server; an external one is not ours to restart")
    from onebox.store.embedded import start_embedded, stop_embedded

    plan = parse_plan({"steps": [
        {"id": f"s{i}", "tool": "bash", "code": f"sleep 0.4; echo s{i} >> ledger.txt",
         **({"depends_on": [f"s{i - 1}"]} if i > 1 else {})} for i in range(1, 6)]})
    sub = await rt.submit(plan)
    driving = asyncio.create_task(rt.drive(sub.run_id))

    async def two_done() -> bool:
        return sum(s["status"] == "SUCCESS" for s in await runs_api.run_steps(rt.db, sub.run_id)) >= 2
    await wait_until(two_done)
    assert await asyncio.to_thread(stop_embedded, onebox_home / "pg")
    with pytest.raises(psycopg.OperationalError):
        await psycopg.AsyncConnection.connect(rt.db.url)
    await asyncio.sleep(1.0)
    await asyncio.to_thread(start_embedded, onebox_home / "pg")
    final = await asyncio.wait_for(driving, 90)
    assert final["status"] == "SUCCEEDED", final["error"]
    steps = await runs_api.run_steps(rt.db, sub.run_id)
    assert {s["step_id"] for s in steps if s["status"] == "SUCCESS"} == {f"s{i}" for i in range(1, 6)}
