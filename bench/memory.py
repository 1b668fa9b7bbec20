"""A worker's memory over many small runs: it must stay flat (every cache has a bound).

One `onebox worker` process (real sandbox, embedded PostgreSQL) runs N one-step plans,
submitted 1,000 at a time; after each 1,000 finished runs the bench reads the worker's
resident memory (VmRSS of the process). The slope of a least-squares line through those
points, after the first (warm-up) one, is the growth in KB per 1,000 runs.

Writes bench/results/memory.json. Run: .venv/bin/python bench/memory.py [--runs 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from onebox.agent.plan import parse_plan
from onebox.config import Settings, load_settings
from onebox.runtime.services.submission import submit_plan
from onebox.store.db import Database

ROOT = Path(__file__).resolve().parents[1]
BATCH_RUNS = 1_000
TARGET_KB_PER_1K_RUNS = 256.0  # flat: well under the 3.7 MB per 1,000 runs seen before
WAIT_S = 1_800.0
# Each run has its own plan version (a new entry for a plan cache), prints a little and
# leaves a file (a snapshot): the paths where a per-run cache would grow.
PLAN = {"steps": [{"id": "s", "tool": "bash", "code": "echo hello > out.txt; cat out.txt"}]}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def slope_per_1k(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of RSS (KB) against runs, scaled to KB per 1,000 runs."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else 1_000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


async def finished(db: Database) -> int:
    row = await db.fetchone("SELECT count(*) AS n FROM onebox.runs WHERE status IN "
                            "('SUCCEEDED', 'FAILED', 'CANCELLED', 'DEAD')")
    return int(row["n"]) if row else 0


async def run_batch(db: Database, settings: Settings, done_before: int) -> None:
    plan = parse_plan(PLAN)
    for _ in range(BATCH_RUNS):
        await submit_plan(db, settings, plan)
    deadline = time.monotonic() + WAIT_S
    while await finished(db) < done_before + BATCH_RUNS:
        if time.monotonic() > deadline:
            raise RuntimeError("the worker stopped finishing runs")
        await asyncio.sleep(0.5)


def start_worker(home: Path, db: Database) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ONEBOX_HOME": str(home), "ONEBOX_DATABASE_URL": db.url,
           "ONEBOX_LOG_LEVEL": "WARNING"}
    onebox = str(Path(sys.executable).with_name("onebox"))
    return subprocess.Popen([onebox, "worker", "--drain-s", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def measure(db: Database, settings: Settings, worker: int, runs: int) -> dict[str, Any]:
    points: list[tuple[int, int]] = []
    for batch in range(runs // BATCH_RUNS):
        started = time.monotonic()
        await run_batch(db, settings, batch * BATCH_RUNS)
        points.append(((batch + 1) * BATCH_RUNS, rss_kb(worker)))
        print(f"{points[-1][0]} runs: rss {points[-1][1]} KB "
              f"({time.monotonic() - started:.0f} s)", flush=True)
    steady = points[1:] if len(points) > 2 else points
    slope = round(slope_per_1k(steady), 1)
    return {"rss_kb_after_each_1000_runs": [{"runs": r, "rss_kb": kb} for r, kb in points],
            "slope_kb_per_1000_runs": slope, "target_kb_per_1000_runs": TARGET_KB_PER_1K_RUNS,
            "meets_target": abs(slope) <= TARGET_KB_PER_1K_RUNS}


async def main_async(runs: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="obx-bench-mem-"))
    home.chmod(0o755)
    settings = load_settings(home=home)
    db = await Database.open(settings)
    worker = start_worker(home, db)
    try:
        result = await measure(db, settings, worker.pid, runs)
    finally:
        worker.terminate()
        worker.wait(60)
        await db.close()
        from onebox.store.embedded import stop_embedded

        stop_embedded(settings.pg_dir)
        shutil.rmtree(home, ignore_errors=True)
    return {"benchmark": "RSS of one worker process over small runs (one bash step each)",
            "runs": runs, **result,
            "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cpus",
            "python": platform.python_version(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10_000, help="a multiple of 1,000")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "memory.json")
    args = parser.parse_args()
    result = asyncio.run(main_async(args.runs))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
