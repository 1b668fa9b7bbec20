"""CLI overhead: `onebox run` on a one-step plan vs `python3 -c pass`, and embedded DB start times.

Writes bench/results/cli.json. Run: .venv/bin/python bench/cli.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ONEBOX = str(Path(sys.executable).with_name("onebox"))
ONE_STEP = "name: bench\nsteps:\n  - id: noop\n    tool: python\n    code: pass\n"


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median_ms": round(statistics.median(samples), 1), "min_ms": round(min(samples), 1),
            "max_ms": round(max(samples), 1), "n": len(samples)}


def bench_run(runs: int, home: Path) -> dict[str, Any]:
    env = {**os.environ, "ONEBOX_HOME": str(home)}
    plan = home / "one_step.yaml"
    plan.write_text(ONE_STEP)
    # The interpreter itself, not a version-manager shim (pyenv's python3 is a shell script).
    python3 = os.path.realpath(sys.executable)
    bare = [timed([python3, "-c", "pass"], env) for _ in range(runs)]
    # Keep the embedded server up between runs, as it is for a user running commands in a row.
    keeper = subprocess.Popen([sys.executable, "-c", KEEPER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert keeper.stdout is not None
    keeper.stdout.readline()
    try:
        timed([ONEBOX, "run", str(plan), "--json"], env)  # warm-up: migrations, caches
        onebox = [timed([ONEBOX, "run", str(plan), "--json"], env) for _ in range(runs)]
    finally:
        assert keeper.stdin is not None
        keeper.stdin.close()
        keeper.wait()
    return {
        "onebox_run_one_step": summary(onebox),
        "python_c_pass": summary(bare),
        "ratio_median": round(statistics.median(onebox) / statistics.median(bare), 1),
        "note": "onebox run = interpreter start, imports, attach to the running embedded "
                "database, submit, one sandboxed step, archive, timeline query",
    }


KEEPER = """
import sys
from onebox.config import load_settings
from onebox.store.embedded import start_embedded
server, _ = start_embedded(load_settings().pg_dir)
print("up", flush=True)
sys.stdin.read()
"""


def bench_db_start(runs: int) -> dict[str, Any]:
    from onebox.store.embedded import start_embedded, stop_embedded

    cold, restart, attach = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="obx-bench-") as tmp:
            pg = Path(tmp) / "pg"
            t = time.perf_counter()
            server, _ = start_embedded(pg, keep_running=True)
            cold.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            asyncio.run(_connect(server.get_uri()))
            attach.append((time.perf_counter() - t) * 1000)
            stop_embedded(pg)
            _forget(server)
            t = time.perf_counter()
            server, _ = start_embedded(pg, keep_running=True)
            restart.append((time.perf_counter() - t) * 1000)
            stop_embedded(pg)
            _forget(server)
    return {"cold_initdb_and_start": summary(cold), "start_existing_data_dir": summary(restart),
            "connect_to_running_server": summary(attach)}


async def _connect(url: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute("SELECT 1")


def _forget(server: Any) -> None:
    type(server)._instances.pop(server.pgdata, None)  # the embedded engine's launcher class


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cli.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="obx-bench-home-") as home:
        result = {
            "machine": f"{platform.system()} {platform.release()}, {os.cpu_count()} cpus",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cli": bench_run(args.runs, Path(home)),
            "embedded_db": bench_db_start(max(3, args.runs // 2)),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
