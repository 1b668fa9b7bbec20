"""Benchmark workspace snapshots; writes bench/results/snapshots.json.

    .venv/bin/python bench/snapshots.py [--files 1000] [--file-kb 100] [--steps 20] [--s3]

Measures, on the fs object store (with fsync, the default), snapshots taken the way the
executor takes them (row in PostgreSQL first, then the objects):
- first snapshot of a 100 MB workspace of 1,000 files: time and stored bytes;
- a second snapshot after changing 1% of the bytes (10 files): time and stored bytes
  (target: <= 2% of the first);
- restore time of that snapshot into a new directory;
- the overhead the default policy ("always": a snapshot before and after each step,
  rows in PostgreSQL, links from task_execution) adds to a step on a small workspace.
With --s3, the large-workspace numbers again against a local moto S3 server (in memory,
so they show request overhead, not a real network).

Timings depend on machine load (recorded as load_avg_1m_at_start); other processes on
a shared 2-core machine can double them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import httpx
from psycopg.types.json import Jsonb

from onebox.config import load_settings
from onebox.objects import FsObjectStore, ObjectStore
from onebox.sandbox.snapshots import restore, scan
from onebox.snapshots import archive
from onebox.store.db import Database

RESULTS = Path(__file__).parent / "results" / "snapshots.json"


def make_workspace(root: Path, files: int, file_bytes: int) -> None:
    for i in range(files):
        sub = root / f"dir{i % 20:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"file{i:04d}.bin").write_bytes(os.urandom(file_bytes))


def change_percent(root: Path, files: int, file_bytes: int, percent: float) -> int:
    """Rewrite whole files until ``percent`` of the bytes changed; return bytes changed."""
    count = max(1, round(files * percent / 100))
    for i in range(count):
        (root / f"dir{i % 20:02d}" / f"file{i:04d}.bin").write_bytes(os.urandom(file_bytes))
    return count * file_bytes


async def large_workspace(
    db: Database, work: Path, files: int, file_kb: int, store: ObjectStore
) -> dict[str, Any]:
    """Snapshots as the executor takes them (rows in PostgreSQL, then objects)."""
    ws, session = work / "ws", f"large-{uuid.uuid4().hex[:8]}"
    file_bytes = file_kb * 1024
    shutil.rmtree(ws, ignore_errors=True)
    shutil.rmtree(work / "restored", ignore_errors=True)
    make_workspace(ws, files, file_bytes)
    t0 = time.perf_counter()
    hashed = scan(ws)
    scan_s = time.perf_counter() - t0
    first = await _timed_snapshot(db, store, ws, session)
    changed = change_percent(ws, files, file_bytes, 1.0)
    second = await _timed_snapshot(db, store, ws, session)
    t0 = time.perf_counter()
    restored = await restore(store, second["sha256"], work / "restored")
    restore_s = time.perf_counter() - t0
    assert scan(work / "restored").sha256 == second["sha256"]
    return {
        "workspace": {"files": files, "bytes": hashed.total_bytes},
        "hash_only_s": round(scan_s, 3),
        "first": {"time_s": first["time_s"], "stored_bytes": first["stored_bytes"]},
        "after_1pct_change": {
            "bytes_changed": changed, "time_s": second["time_s"],
            "stored_bytes": second["stored_bytes"],
            "stored_ratio_to_first": round(second["stored_bytes"] / first["stored_bytes"], 5),
            "target_ratio_max": 0.02,
        },
        "restore": {"time_s": round(restore_s, 3), "files": restored.file_count},
    }


async def _timed_snapshot(
    db: Database, store: ObjectStore, ws: Path, session: str
) -> dict[str, Any]:
    t0 = time.perf_counter()
    record = await archive.record_snapshot(db, store, ws, session_id=session)
    assert record.info is not None
    return {"time_s": round(time.perf_counter() - t0, 3), "sha256": record.sha256,
            "stored_bytes": record.info.stored_bytes}


async def insert_execution(db: Database, session_id: str) -> uuid.UUID:
    run_id, plan_id, exec_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    async with db.transaction() as conn:
        await conn.execute("INSERT INTO onebox.runs (id, trace_id, source, request) "
                           "VALUES (%s, %s, 'plan', %s)", (run_id, uuid.uuid4().hex, Jsonb({})))
        await conn.execute("INSERT INTO onebox.plans (id, run_id, version, spec, spec_hash) "
                           "VALUES (%s, %s, 1, %s, %s)", (plan_id, run_id, Jsonb({}), "0" * 64))
        await conn.execute(
            "INSERT INTO onebox.task_execution (id, run_id, plan_id, session_id, trace_id, "
            "step_id, step_number, tool_name, input_hash, status) "
            "VALUES (%s, %s, %s, %s, %s, 's', 1, 'python', %s, 'RUNNING')",
            (exec_id, run_id, plan_id, session_id, uuid.uuid4().hex, "0" * 64))
    return exec_id


async def step_overhead(
    db: Database, work: Path, steps: int, *, files: int = 20, file_bytes: int = 10_000
) -> dict[str, Any]:
    """Per-step cost of policy 'always' (snapshot before and after, one file changed)."""
    store = FsObjectStore(work / f"objects-{files}")
    ws = work / f"steps-{files}"
    make_workspace(ws, files, file_bytes)
    await asyncio.sleep(2.1)  # files younger than the hash cache's racy window are re-read
    timings = []
    for n in range(steps):
        exec_id = await insert_execution(db, f"bench-{files}")
        t0 = time.perf_counter()
        await archive.snapshot_before_step(db, store, ws, session_id=f"bench-{files}",
                                           execution_id=exec_id, policy="always")
        pre_s = time.perf_counter() - t0
        (ws / "dir00" / "file0000.bin").write_bytes(os.urandom(10_000) + bytes([n % 256]))
        t1 = time.perf_counter()
        await archive.snapshot_step(db, store, ws, session_id=f"bench-{files}",
                                    execution_id=exec_id, policy="always", failed=False)
        timings.append(pre_s + time.perf_counter() - t1)
    ms = sorted(t * 1000 for t in timings[2:])  # the first steps warm caches and connections
    return {
        "workspace": {"files": files, "bytes": files * file_bytes}, "steps": steps,
        "policy": "always",
        "median_ms": round(statistics.median(ms), 2),
        "p90_ms": round(ms[int(len(ms) * 0.9) - 1], 2),
    }


@contextmanager
def moto_server() -> Iterator[str]:
    """A local S3-compatible server (moto, in memory) on a free port of 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                httpx.get(url + "/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def s3_workspace(db: Database, work: Path, files: int, file_kb: int) -> dict[str, Any]:
    from onebox.objects.s3 import S3ObjectStore

    with moto_server() as url:
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x",
                     aws_secret_access_key="x").create_bucket(Bucket="bench")
        store = S3ObjectStore("bench", "onebox", endpoint_url=url, access_key_id="x",
                              secret_access_key="x")
        try:
            return await large_workspace(db, work, files, file_kb, store)
        finally:
            await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--file-kb", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--s3", action="store_true",
                        help="also run the large workspace against a local moto S3 server")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="obx-bench-snap-", dir=args.workdir))
    db = await Database.open(load_settings(home=work / "home"))
    try:
        result: dict[str, Any] = {
            "benchmark": "snapshots",
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "load_avg_1m_at_start": round(os.getloadavg()[0], 2)},
            "object_store": "fs (fsync on)",
            "large_workspace": await large_workspace(db, work, args.files, args.file_kb,
                                                     FsObjectStore(work / "objects")),
            "step_overhead": await step_overhead(db, work, args.steps),
            "step_overhead_100mb": await step_overhead(db, work, 8, files=args.files,
                                                       file_bytes=args.file_kb * 1024),
        }
        if args.s3:
            result["large_workspace_s3_moto"] = await s3_workspace(db, work, args.files,
                                                                   args.file_kb)
    finally:
        await db.close()
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
