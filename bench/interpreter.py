"""Interpreter benchmark: a warm `x + 1` call in a session's stateful interpreter (issue 15
target: at most 5 ms), the cold first call (sandbox + interpreter start), and the same
code as a stateless one-shot execute, side by side in one run on the same machine.

Run: .venv/bin/python bench/interpreter.py [--n 300] [--out bench/results/interpreter.json]
Timings are wall time of the backend call as a caller sees it (``run_cell`` / ``execute``),
files_written included; milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from onebox.config import SandboxSettings, load_settings
from onebox.sandbox.base import CellRequest, ExecRequest
from onebox.sandbox.linux import BwrapSandbox

TARGET_WARM_MS = 5.0


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
        "min_ms": round(ordered[0], 3),
        "max_ms": round(ordered[-1], 3),
    }


async def _timed_cell(backend: BwrapSandbox, session: str, code: str) -> float:
    started = time.perf_counter()
    result = await backend.run_cell(CellRequest(session, code))
    elapsed = (time.perf_counter() - started) * 1000
    if not result.ok:
        raise RuntimeError(f"benchmark cell failed: {result.error}")
    return elapsed


async def _timed_exec(backend: BwrapSandbox, session: str, code: str) -> float:
    started = time.perf_counter()
    result = await backend.execute(ExecRequest(session_id=session, code=code))
    elapsed = (time.perf_counter() - started) * 1000
    if not result.ok:
        raise RuntimeError(f"benchmark execute failed: {result.stderr}")
    return elapsed


async def measure(home: Path, n: int, cold_n: int) -> dict[str, Any]:
    sandbox = SandboxSettings(backend="linux")  # type: ignore[call-arg]
    backend = BwrapSandbox(load_settings(home=home, sandbox=sandbox))
    try:
        cold = [await _timed_cell(backend, f"bench-cold-{uuid.uuid4().hex[:8]}", "x = 41")
                for _ in range(cold_n)]
        session = f"bench-warm-{uuid.uuid4().hex[:8]}"
        await _timed_cell(backend, session, "x = 41")
        warm = [await _timed_cell(backend, session, "x + 1") for _ in range(n)]
        stateless_session = f"bench-stateless-{uuid.uuid4().hex[:8]}"
        await _timed_exec(backend, stateless_session, "x = 41\nprint(x + 1)")
        stateless = [await _timed_exec(backend, stateless_session, "x = 41\nprint(x + 1)")
                     for _ in range(max(20, n // 10))]
    finally:
        await backend.close()
    warm_stats = _stats(warm)
    return {
        "warm_x_plus_1": warm_stats, "cold_first_call": _stats(cold),
        "stateless_execute_same_code": _stats(stateless),
        "target_warm_p50_ms": TARGET_WARM_MS,
        "meets_target": warm_stats["p50_ms"] <= TARGET_WARM_MS,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_1m": round(os.getloadavg()[0], 2)},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--cold", type=int, default=10)
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results/interpreter.json"))
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="onebox-bench-interp-"))
    os.chmod(home, 0o755)
    result = asyncio.run(measure(home / "home", args.n, args.cold))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
