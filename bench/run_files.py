"""What a run's files as one history cost a step: the view, the scan, the snapshots and the
commit, at 1, 100 and 10,000 files in the workspace.

Writes bench/results/run_files.json. Run: .venv/bin/python bench/run_files.py [--quick]

A run's first step makes N small files; then a chain of steps alternates a step that
changes nothing (``true``) and a step that writes one file. A step's cost is its attempt's
time from claim to archive (``finished_at - started_at`` in the database: the view, the
copy's scan, the snapshots, the sandbox and the commit) minus the time the sandbox itself
took (``duration_ms``); p50 and p95 over the chain, with ``snapshot_policy: always`` (the
history) and ``never`` (no snapshots: the bare step). On one host, the embedded PostgreSQL
and the fs object store. The same script run against another checkout (PYTHONPATH) gives
that code's figures: results keep both under the label given with --label.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from onebox.agent.plan import parse_plan
from onebox.config import load_settings
from onebox.runtime.services.service import Runtime

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "run_files.json"
MAKE = ("import os\nfor i in range({n}):\n    d = f'd{{i % 50}}'\n    os.makedirs(d, exist_ok=True)\n"
        "    open(f'{{d}}/f{{i}}.txt', 'w').write(str(i))\n")


def plan(files: int, steps: int) -> Any:
    chain: list[dict[str, Any]] = [{"id": "make", "tool": "python",
                                    "code": MAKE.format(n=files)}]
    for i in range(steps):
        code = "true" if i % 2 == 0 else f"echo {i} > one.txt"
        chain.append({"id": f"s{i}", "tool": "bash", "code": code,
                      "depends_on": [chain[-1]["id"]]})
    return parse_plan({"name": f"files-{files}", "steps": chain})


async def measure(files: int, steps: int, policy: str) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="onebox-bench-files-"))
    home.chmod(0o755)
    settings = load_settings(home=home / "home", snapshot_policy=policy)
    settings.runtime.poll_s = 0.02
    async with await Runtime.open(settings) as rt:
        run = await rt.run_plan(plan(files, steps))
        assert run["status"] == "SUCCEEDED", run["error"]
        rows = await rt.db.fetch(
            "SELECT step_id, extract(epoch FROM finished_at - started_at) * 1000 AS wall_ms, "
            "duration_ms FROM onebox.task_execution WHERE run_id = %s AND step_id <> 'make'",
            (run["id"],))
    subprocess.run(["rm", "-rf", str(home)], capture_output=True)
    out: dict[str, Any] = {}
    for kind, parity in (("unchanged", 0), ("one_file", 1)):
        over = [float(r["wall_ms"]) - float(r["duration_ms"] or 0) for r in rows
                if int(r["step_id"][1:]) % 2 == parity]
        out[kind] = {"p50_ms": round(statistics.median(over), 1),
                     "p95_ms": round(statistics.quantiles(over, n=20)[-1], 1), "n": len(over)}
    return out


async def main(label: str, quick: bool) -> dict[str, Any]:
    sizes = (1, 100) if quick else (1, 100, 10_000)
    steps = 10 if quick else 40
    figures: dict[str, Any] = {}
    for files in sizes:
        for policy in ("always", "never"):
            figures[f"{files}_files_{policy}"] = await measure(files, steps, policy)
            print(files, policy, figures[f"{files}_files_{policy}"], flush=True)
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="this change")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(main(args.label, args.quick))
    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    doc.setdefault("runs", {})[args.label] = {
        "figures": figures, "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2)}
    doc["about"] = ("per step, outside the sandbox (claim to archive minus the sandbox's own "
                    "time), ms: a step that changes nothing and a one-file step after a first "
                    "step made N files; snapshot_policy always (the history) vs never (bare)")
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
