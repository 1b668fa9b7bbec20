"""The cost of forking a run against running its inherited steps again.

Writes bench/results/fork.json. Run: .venv/bin/python bench/fork.py [--quick]

A run of N sequential steps (each a short Python computation writing a file) runs to the
end on the embedded PostgreSQL and the real sandbox. It is then forked at its last step:
``fork_run`` keeps the N-1 steps before it (copies their attempts, points the fork's
workspace at the snapshot before the last step). Compared: the time ``fork_run`` takes, and
the time the parent took from its start to its last step's start (what running the
inherited steps again would cost). The fork's last step is then run, to check the fork is
usable (its workspace holds the N-1 files).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from onebox.agent.plan import parse_plan
from onebox.config import load_settings
from onebox.runtime.services.forks import fork_run
from onebox.runtime.services.service import Runtime

ROOT = Path(__file__).resolve().parents[1]
STEP = ("import hashlib\nh = b'x'\nfor _ in range(20000):\n    h = hashlib.sha256(h).digest()\n"
        "open('f{n}.txt', 'w').write(h.hex())\nprint(h.hex()[:8])")


def plan(n: int) -> Any:
    return parse_plan({"name": "chain", "steps": [
        {"id": f"s{i}", "tool": "python", "code": STEP.replace("{n}", str(i)),
         **({"depends_on": [f"s{i - 1}"]} if i else {})} for i in range(n)]})


async def one(rt: Runtime, n: int) -> dict[str, Any]:
    parent = (await rt.submit(plan(n))).run_id
    await rt.drive(parent)
    times = await rt.db.fetchone(
        "SELECT min(created_at) FILTER (WHERE type = 'run_started') AS started, "
        "max(created_at) FILTER (WHERE type = 'step_started' AND payload ->> 'step_id' = %s) "
        "AS last FROM onebox.agent_events WHERE run_id = %s", (f"s{n - 1}", parent))
    assert times is not None
    rerun_s = (times["last"] - times["started"]).total_seconds()
    started = time.perf_counter()
    forked = await fork_run(rt.db, rt.settings, parent, "default", at=f"s{n - 1}")
    fork_ms = (time.perf_counter() - started) * 1000
    final = await rt.drive(forked.run_id)
    listing = await rt.db.fetchone(
        "SELECT status FROM onebox.task_execution WHERE run_id = %s AND step_id = %s",
        (forked.run_id, f"s{n - 1}"))
    return {"steps": n, "inherited": len(forked.inherited), "fork_ms": round(fork_ms, 2),
            "rerun_inherited_s": round(rerun_s, 3),
            "rerun_over_fork": round(rerun_s * 1000 / fork_ms, 1),
            "fork_status": final["status"], "last_step": listing["status"] if listing else None}


async def main(quick: bool) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="onebox-bench-fork-"))
    home.chmod(0o755)
    settings = load_settings(home=home)
    sizes = (5, 10) if quick else (5, 10, 20)
    async with await Runtime.open(settings) as rt:
        rows = [await one(rt, n) for n in sizes for _ in range(1 if quick else 3)]
    by_size = {}
    for n in sizes:
        mine = [r for r in rows if r["steps"] == n]
        by_size[str(n)] = {
            "fork_ms_median": round(statistics.median(r["fork_ms"] for r in mine), 2),
            "rerun_inherited_s_median": round(statistics.median(
                r["rerun_inherited_s"] for r in mine), 3),
            "forks_succeeded": sum(r["fork_status"] == "SUCCEEDED" for r in mine),
            "rounds": len(mine)}
    return {"machine": f"{platform.system()} {platform.release()}",
            "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "database": "embedded", "by_steps": by_size, "rounds": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fork.json"))
    args = parser.parse_args()
    result = asyncio.run(main(args.quick))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["by_steps"], indent=2))
