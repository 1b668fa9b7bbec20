"""Many hosts: throughput with 1, 2 and 3 hosts, a host's death to its steps resumed
elsewhere, bytes moved between hosts per step, and the cost of the freshness check.

Writes bench/results/hosts.json. Run (as root: it makes network namespaces):
    .venv/bin/python bench/hosts.py [--quick]

The cluster is the suite's (tests/chaos/cluster.py): each host a network namespace with its
own home and sandbox root running `onebox worker`, one PostgreSQL over TCP (the embedded
server behind a relay), moto's S3 server over HTTP. Two CPUs run all of it: three hosts
share the same two cores, so the host counts show the overhead of coordination, not the
speed-up real machines would give.

- throughput: N runs of a 3-step plan (two parallel steps and a join), submitted at once;
  runs/s and step claims/s from the first claim to the last run's end.
- failover: a host's worker is SIGKILLed while it runs steps; for each of its steps, the
  time from the kill to that step's next attempt starting on another host (bounded by the
  lease, 4 s here).
- bytes: per step, the bytes restored from the object store (restores of a head onto a
  host) and stored into it (new blobs and manifests), from the snapshot rows.
- session routing: a file read from a session through the API server holding it, and
  through another server that forwards it (one more HTTP hop and one indexed query).
- freshness: StepWorkspace.prepare for a step whose host copy is current (the one-host
  case), in process; target under 1 ms p50.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import signal
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "chaos"))

from cluster import Cluster, cluster  # noqa: E402

from onebox.agent.plan import parse_plan  # noqa: E402
from onebox.config import load_settings  # noqa: E402
from onebox.store.db import Database, migrate  # noqa: E402
from onebox.store.embedded import start_embedded  # noqa: E402

FAST = {"ONEBOX_RUNTIME__LEASE_S": "4", "ONEBOX_RUNTIME__HEARTBEAT_S": "0.5",
        "ONEBOX_RUNTIME__POLL_S": "0.2"}
SMALL = {"steps": [
    {"id": "a", "tool": "bash", "code": "echo a > a.txt"},
    {"id": "b", "tool": "bash", "code": "head -c 20000 /dev/urandom > b.bin"},
    {"id": "join", "tool": "bash", "code": "ls", "depends_on": ["a", "b"]},
]}
SLOW = {"steps": [{"id": f"s{n}", "tool": "bash", "code": "sleep 3"} for n in range(4)]}


def pct(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


async def _submit(db: Database, plan: dict[str, Any]) -> uuid.UUID:
    from onebox.runtime.services.submission import submit_plan

    settings = load_settings()
    return (await submit_plan(db, settings, parse_plan(plan))).run_id


async def _wait_runs(db: Database, runs: list[uuid.UUID], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = await db.fetchone("SELECT count(*) AS n FROM onebox.runs WHERE id = ANY(%s) AND "
                                "status IN ('SUCCEEDED','FAILED','DEAD')", (runs,))
        if row and row["n"] == len(runs):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("runs did not finish")


async def throughput(db: Database, made: Cluster, hosts: int, n_runs: int) -> dict[str, Any]:
    runs = [await _submit(db, SMALL) for _ in range(n_runs)]
    for host in made.hosts[:hosts]:
        host.work(concurrency=4)
    await _wait_runs(db, runs, 600)
    for host in made.hosts[:hosts]:
        host.stop("worker")
    span = await db.fetchone(
        "SELECT min(e.created_at) AS first, max(r.updated_at) AS last, "
        "count(*) FILTER (WHERE e.type = 'step_started') AS claims "
        "FROM onebox.agent_events e JOIN onebox.runs r ON r.id = e.run_id "
        "WHERE e.run_id = ANY(%s) AND e.type = 'step_started'", (runs,))
    assert span is not None
    seconds = (span["last"] - span["first"]).total_seconds()
    ok = await db.fetchone("SELECT count(*) AS n FROM onebox.runs WHERE id = ANY(%s) AND "
                           "status = 'SUCCEEDED'", (runs,))
    moved = await _bytes(db, runs)
    return {"hosts": hosts, "runs": n_runs, "succeeded": ok["n"] if ok else 0,
            "seconds": round(seconds, 2), "runs_per_s": round(n_runs / seconds, 2),
            "claims_per_s": round(span["claims"] / seconds, 2), **moved}


async def _bytes(db: Database, runs: list[uuid.UUID]) -> dict[str, Any]:
    steps = await db.fetchone("SELECT count(*) AS n FROM onebox.task_execution WHERE "
                              "run_id = ANY(%s) AND status = 'SUCCESS'", (runs,))
    restored = await db.fetchone(
        "SELECT coalesce(sum(s.bytes), 0) AS b, count(*) AS n FROM onebox.agent_events e "
        "JOIN onebox.snapshots s ON s.id = (e.payload ->> 'snapshot_id')::uuid "
        "WHERE e.run_id = ANY(%s) AND e.type = 'workspace_restored'", (runs,))
    stored = await db.fetchone(
        "SELECT coalesce(sum(stored_bytes), 0) AS b FROM onebox.snapshots WHERE session_id = "
        "ANY(%s)", ([f"run-{r}" for r in runs],))
    merges = await db.fetchone(
        "SELECT count(*) AS n FROM onebox.agent_events WHERE run_id = ANY(%s) AND "
        "type = 'workspace_merged'", (runs,))
    n = max(1, int(steps["n"])) if steps else 1
    return {"steps": n, "restores": restored["n"] if restored else 0,
            "merges": merges["n"] if merges else 0,
            "restored_bytes_per_step": round(int(restored["b"]) / n) if restored else 0,
            "stored_bytes_per_step": round(int(stored["b"]) / n) if stored else 0}


async def failover(db: Database, made: Cluster, rounds: int) -> dict[str, Any]:
    victim, rescuer = made.hosts[0], made.hosts[1]
    samples: list[float] = []
    for _ in range(rounds):
        run = await _submit(db, SLOW)
        victim.work(concurrency=4)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            running = await db.fetchone("SELECT count(*) AS n FROM onebox.task_execution "
                                        "WHERE run_id = %s AND status = 'RUNNING'", (run,))
            if running and running["n"] >= 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        held = [r["step_id"] for r in await db.fetch(
            "SELECT step_id FROM onebox.task_execution WHERE run_id = %s AND status = "
            "'RUNNING'", (run,))]
        killed_at = datetime.now(UTC)
        victim.kill_all()
        rescuer.work(concurrency=4)
        await _wait_runs(db, [run], 120)
        rescuer.stop("worker")
        for step in held:
            row = await db.fetchone(
                "SELECT min(created_at) AS t FROM onebox.agent_events WHERE run_id = %s AND "
                "type = 'step_started' AND payload ->> 'step_id' = %s AND "
                "(payload ->> 'attempt')::int > 1", (run, step))
            if row and row["t"]:
                samples.append((row["t"] - killed_at).total_seconds())
    return {"rounds": rounds, "steps_resumed": len(samples), "p50_s": pct(samples, 0.5),
            "p99_s": pct(samples, 0.99), "max_s": max(samples) if samples else None,
            "lease_s": float(FAST["ONEBOX_RUNTIME__LEASE_S"])}


async def routing(db: Database, made: Cluster, n: int) -> dict[str, Any]:
    """One session on host 1; the same call through host 1 (direct) and host 2 (forwarded)."""
    import httpx

    from onebox.runtime.services.api_keys import create_key

    key = (await create_key(db, tenant_id="bench", name="bench"))[0]
    holder, other = made.hosts[0], made.hosts[1]
    holder.serve()
    other.serve()
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30, headers=headers) as client:
        session = (await client.post(f"{holder.url}/v1/sessions")).json()["id"]
        await client.post(f"{holder.url}/v1/sessions/{session}/execute",
                          json={"code": "echo x > x.txt", "language": "bash"})
        result: dict[str, Any] = {"calls": n}
        for name, base in (("direct", holder.url), ("forwarded", other.url)):
            timings = []
            for _ in range(n):
                started = time.perf_counter()
                got = await client.get(f"{base}/v1/sessions/{session}/files/x.txt")
                timings.append((time.perf_counter() - started) * 1000)
                assert got.status_code == 200, got.text
            result[f"{name}_p50_ms"] = pct(timings, 0.5)
            result[f"{name}_p99_ms"] = pct(timings, 0.99)
    holder.stop("serve")
    other.stop("serve")
    return result


async def freshness(url: str, home: Path, n: int) -> dict[str, Any]:
    from onebox.objects.fs import FsObjectStore
    from onebox.runtime.engine.workspaces import StepWorkspace
    from onebox.sandbox.registry import get_backend

    settings = load_settings(home=home, database_url=url)
    db = await Database.open(settings, run_migrations=False)
    backend = get_backend(settings)
    objects = FsObjectStore(home / "objects", fsync=False)
    try:
        run = await _submit(db, {"steps": [{"id": "a", "tool": "bash", "code": "true"},
                                           {"id": "b", "tool": "bash", "code": "true",
                                            "depends_on": ["a"]}]})
        workspaces = StepWorkspace(db, backend, objects, settings)
        row = dict(await db.fetchone("SELECT * FROM onebox.task_execution WHERE run_id = %s "
                                     "AND step_id = 'a'", (run,)) or {})
        async with workspaces.using(row):  # the first step: makes the copy and the head
            await backend.execute(_request(row["session_id"]))
            await workspaces.after(row, failed=False)
        timings = []
        for _ in range(n):
            started = time.perf_counter()
            await workspaces.prepare(row)
            timings.append((time.perf_counter() - started) * 1000)
        return {"calls": n, "p50_ms": pct(timings, 0.5), "p99_ms": pct(timings, 0.99),
                "target_p50_ms": 1.0}
    finally:
        await backend.close()
        await objects.close()
        await db.close()


def _request(session_id: str) -> Any:
    from onebox.sandbox.base import ExecRequest

    return ExecRequest(session_id=session_id, code="echo x > x.txt", language="bash")


async def main(quick: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="onebox-bench-hosts-"))
    tmp.chmod(0o755)
    server, admin = start_embedded(tmp / "pg")
    try:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            await conn.execute("CREATE DATABASE bench_hosts")
        info = psycopg.conninfo.conninfo_to_dict(admin)
        url = psycopg.conninfo.make_conninfo(**{**{k: v for k, v in info.items() if v},
                                                "dbname": "bench_hosts"})
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn)
        db = await Database.open(load_settings(home=tmp / "client", database_url=url),
                                 run_migrations=False)
        result: dict[str, Any] = {
            "machine": f"{platform.system()} {platform.release()}, 2 cpus shared by every host",
            "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        try:
            with cluster(tmp / "cluster", url, settings=FAST) as made:
                n_runs = 10 if quick else 30
                result["throughput"] = [await throughput(db, made, k, n_runs) for k in (1, 2, 3)]
                result["failover"] = await failover(db, made, 2 if quick else 5)
                result["session_routing"] = await routing(db, made, 50 if quick else 300)
            result["freshness_check"] = await freshness(url, tmp / "fresh", 200 if quick else 1000)
        finally:
            await db.close()
        return result
    finally:
        server.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "hosts.json"))
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out = asyncio.run(main(args.quick))
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
