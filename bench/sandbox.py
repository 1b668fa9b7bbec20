"""Sandbox benchmark: host vs sandbox start-up, new vs existing sessions, throughput, idle cost.

Run: .venv/bin/python bench/sandbox.py [--home DIR] [--out bench/results/sandbox.json]
Everything is measured side by side in one run on the same machine; the JSON
holds raw medians/p50/p90 in milliseconds and the targets from issue 3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from onebox.config import SandboxSettings, load_settings
from onebox.sandbox.base import ExecRequest
from onebox.sandbox.linux import BwrapSandbox

PY_PASS = ("/usr/bin/python3", "-c", "pass")
BASH_TRUE = ("/bin/bash", "-c", "true")


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 2),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "min_ms": round(ordered[0], 2),
    }


async def _host_run(argv: tuple[str, ...]) -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    await proc.communicate()
    return (time.perf_counter() - started) * 1000


async def _sandbox_run(backend: BwrapSandbox, session: str, argv: tuple[str, ...]) -> float:
    started = time.perf_counter()
    result = await backend.execute(ExecRequest(session_id=session, argv=argv))
    elapsed = (time.perf_counter() - started) * 1000
    if not result.ok:
        raise RuntimeError(f"benchmark call failed: {result.stderr}")
    return elapsed


async def host_baseline(argv: tuple[str, ...], n: int) -> list[float]:
    await _host_run(argv)
    return [await _host_run(argv) for _ in range(n)]


async def new_sessions(
    backend: BwrapSandbox, argv: tuple[str, ...], n: int, warm: bool
) -> list[float]:
    samples = []
    for _ in range(n):
        if warm:
            await backend.pool.wait_ready()
        session = f"bench-new-{uuid.uuid4().hex[:10]}"
        samples.append(await _sandbox_run(backend, session, argv))
        await backend.cleanup(session)
    return samples


async def existing_session(
    backend: BwrapSandbox, argv: tuple[str, ...], n: int, think_s: float = 0.0
) -> list[float]:
    """Calls in one session; ``think_s`` between calls is the runtime's own work between steps."""
    session = f"bench-existing-{uuid.uuid4().hex[:6]}"
    await _sandbox_run(backend, session, argv)
    samples = []
    for _ in range(n):
        await asyncio.sleep(think_s)
        samples.append(await _sandbox_run(backend, session, argv))
    return samples


async def throughput(backend: BwrapSandbox, concurrency: int, seconds: float) -> dict[str, Any]:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(index: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await _sandbox_run(backend, f"bench-tp-{index}", BASH_TRUE)
            done += 1

    cpu_before = _cpu_s()
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    cpu_ms = (_cpu_s() - cpu_before) * 1000 / max(done, 1)
    return {
        "concurrency": concurrency,
        "calls": done,
        "calls_per_s": round(done / elapsed, 1),
        "cpu_ms_per_call": round(cpu_ms, 2),
        "max_calls_per_s_if_all_cpus_free": round((os.cpu_count() or 1) * 1000 / cpu_ms, 1),
    }


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped children (bwrap and everything it ran)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _meminfo_kb() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0])
    return out


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def idle_memory(backend: BwrapSandbox, sessions: int) -> dict[str, Any]:
    """Host memory held per idle session: supervisor RSS + kernel slab/buffers, over N sessions."""
    before, rss_before = _meminfo_kb(), _rss_kb()
    for i in range(sessions):
        await _sandbox_run(backend, f"bench-idle-{i}", BASH_TRUE)
    await asyncio.sleep(0.5)
    after, rss_after = _meminfo_kb(), _rss_kb()
    kernel = sum(after[k] - before[k] for k in ("Slab", "Buffers", "KernelStack", "PageTables"))
    rss = rss_after - rss_before
    for i in range(sessions):
        await backend.cleanup(f"bench-idle-{i}")
    return {
        "sessions": sessions,
        "live_processes_per_idle_session": 0,
        "supervisor_rss_kb_per_session": round(rss / sessions, 1),
        "kernel_kb_per_session": round(kernel / sessions, 1),
        "total_mb_per_session": round((rss + kernel) / sessions / 1024, 3),
        "note": "machine-wide kernel counters; other processes on the host add noise",
    }


async def run(home: Path, n: int) -> dict[str, Any]:
    settings = load_settings(home=home, sandbox=SandboxSettings(pool_size=2, idle_timeout_s=3600))
    backend = BwrapSandbox(settings)
    try:
        await backend.pool.wait_ready()
        host_py = await host_baseline(PY_PASS, n)
        host_bash = await host_baseline(BASH_TRUE, n)
        new_py = await new_sessions(backend, PY_PASS, n, warm=True)
        new_bash = await new_sessions(backend, BASH_TRUE, n, warm=True)
        backend.pool.size = 0
        cold_py = await new_sessions(backend, PY_PASS, max(5, n // 4), warm=False)
        backend.pool.size = 2
        existing_py = await existing_session(backend, PY_PASS, n)
        existing_bash = await existing_session(backend, BASH_TRUE, n)
        existing_py_think = await existing_session(backend, PY_PASS, n, think_s=0.05)
        existing_bash_think = await existing_session(backend, BASH_TRUE, n, think_s=0.05)
        tp = [await throughput(backend, c, 4.0) for c in (1, 4, 8)]
        idle = await idle_memory(backend, 40)
    finally:
        await backend.close()
    ratio = statistics.median(new_py) / statistics.median(host_py)
    return {
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "host_python_pass": _stats(host_py),
        "host_bash_true": _stats(host_bash),
        "new_session_python_pass_pooled": _stats(new_py),
        "new_session_python_pass_ratio_vs_host": round(ratio, 2),
        "new_session_bash_true_pooled": _stats(new_bash),
        "new_session_python_pass_cold_no_pool": _stats(cold_py),
        "existing_session_python_pass": _stats(existing_py),
        "existing_session_bash_true": _stats(existing_bash),
        "existing_session_python_pass_50ms_apart": _stats(existing_py_think),
        "existing_session_bash_true_50ms_apart": _stats(existing_bash_think),
        "load_average_during_run": os.getloadavg(),
        "throughput_bash_true_existing_sessions": tp,
        "idle_session_memory": idle,
        "targets": {
            "new_session_python_ratio": 1.3,
            "new_session_bash_p50_ms": 10,
            "throughput_calls_per_s": 100,
            "idle_session_mb": 1,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results/sandbox.json"))
    parser.add_argument("-n", type=int, default=30)
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="obx-bench-"))
    result = asyncio.run(run(home, args.n))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
