"""Benchmark workspace snapshots; writes bench/results/snapshots.json.

    .venv/bin/python bench/snapshots.py [--files 1000] [--file-kb 100] [--steps 20]

Measures, on the fs object store (with fsync, the default):
- first snapshot of a 100 MB workspace of 1,000 files: time and stored bytes;
- a second snapshot after changing 1% of the bytes (10 files): time and stored bytes
  (target: <= 2% of the first);
- restore time of that snapshot into a new directory;
- the overhead the default policy ("always": a snapshot before and after each step,
  rows in PostgreSQL, links from task_execution) adds to a step on a small workspace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from psycopg.types.json import Jsonb

from onebox.config import load_settings
from onebox.objects import FsObjectStore
from onebox.sandbox import snapshot_archive as archive
from onebox.sandbox.snapshots import capture, restore, scan
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


async def large_workspace(work: Path, files: int, file_kb: int) -> dict[str, Any]:
    ws, store = work / "ws", FsObjectStore(work / "objects")
    file_bytes = file_kb * 1024
    make_workspace(ws, files, file_bytes)
    t0 = time.perf_counter()
    hashed = scan(ws)
    scan_s = time.perf_counter() - t0
    first = await capture(store, ws)
    changed = change_percent(ws, files, file_bytes, 1.0)
    second = await capture(store, ws)
    t0 = time.perf_counter()
    restored = await restore(store, second.sha256, work / "restored")
    restore_s = time.perf_counter() - t0
    assert scan(work / "restored").sha256 == second.sha256
    return {
        "workspace": {"files": files, "bytes": hashed.total_bytes},
        "hash_only_s": round(scan_s, 3),
        "first": {"time_s": round(first.duration_ms / 1000, 3), "stored_bytes": first.stored_bytes},
        "after_1pct_change": {
            "bytes_changed": changed, "time_s": round(second.duration_ms / 1000, 3),
            "stored_bytes": second.stored_bytes,
            "stored_ratio_to_first": round(second.stored_bytes / first.stored_bytes, 5),
            "target_ratio_max": 0.02,
        },
        "restore": {"time_s": round(restore_s, 3), "files": restored.file_count},
    }


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


async def step_overhead(work: Path, steps: int) -> dict[str, Any]:
    """Per-step cost of policy 'always' on a small workspace (20 files, ~200 KB)."""
    settings = load_settings(home=work / "home")
    db = await Database.open(settings)
    store = FsObjectStore(settings.objects_dir)
    ws = work / "small"
    make_workspace(ws, 20, 10_000)
    timings = []
    try:
        for n in range(steps):
            exec_id = await insert_execution(db, "bench")
            t0 = time.perf_counter()
            await archive.snapshot_before_step(db, store, ws, session_id="bench",
                                               execution_id=exec_id, policy="always")
            pre_s = time.perf_counter() - t0
            (ws / "dir00" / "file0000.bin").write_bytes(os.urandom(10_000) + bytes([n % 256]))
            t1 = time.perf_counter()
            await archive.snapshot_step(db, store, ws, session_id="bench", execution_id=exec_id,
                                        policy="always", failed=False)
            timings.append(pre_s + time.perf_counter() - t1)
    finally:
        await db.close()
    ms = sorted(t * 1000 for t in timings[2:])  # the first steps warm caches and connections
    return {
        "workspace": {"files": 20, "bytes": 200_000}, "steps": steps, "policy": "always",
        "median_ms": round(statistics.median(ms), 2),
        "p90_ms": round(ms[int(len(ms) * 0.9) - 1], 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--file-kb", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="obx-bench-snap-", dir=args.workdir))
    try:
        result = {
            "benchmark": "snapshots",
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "load_avg_1m_at_start": round(os.getloadavg()[0], 2)},
            "object_store": "fs (fsync on)",
            "large_workspace": await large_workspace(work, args.files, args.file_kb),
            "step_overhead": await step_overhead(work, args.steps),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
