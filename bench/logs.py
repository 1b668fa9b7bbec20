"""Live logs (issue 14 point 4): print-to-subscriber latency, and the cost of streaming.

Run: .venv/bin/python bench/logs.py [--out bench/results/logs.json]

Real embedded PostgreSQL, real linux sandbox, the in-process worker.

1. Latency: a step prints its clock (time.time()) every 100 ms for 5 s, flushed. A
   subscriber reads the run's events the way SSE does (EventHub + run_event_stream at the
   API's events_poll_s) and, for each printed line, records arrival minus the printed
   time. Target: p50 at most 500 ms.
2. Cost: the wall time of a run whose one step prints 10 MB (100,000 lines of 100 bytes),
   with live logs on (the default cap) and off (live_log_max_bytes = 0), interleaved, the
   median of each. Target: on at most 1.2x off. Also measured: every byte streamed
   (a cap above 10 MB), to show what the cap saves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from onebox.agent.plan import parse_plan
from onebox.api.events import EventHub, run_event_stream
from onebox.config import SandboxSettings, Settings, load_settings
from onebox.runtime.services.service import Runtime

TICKER = ("import time\nfor _ in range(50):\n"
          "    print(repr(time.time()), flush=True)\n    time.sleep(0.1)\n")
TEN_MB = "import sys\nline = 'x' * 99 + '\\n'\nfor _ in range(100_000):\n    sys.stdout.write(line)\n"
ROUNDS = 5
UNCAPPED = 16 << 20  # every byte of the 10 MB streamed as events (160 events of 64 KB)


def _plan(name: str, code: str) -> Any:
    return parse_plan({"name": name, "steps": [{"id": "s", "tool": "python", "code": code}]})


def _summary(values_ms: list[float]) -> dict[str, float]:
    ordered = sorted(values_ms)
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 1),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
            "max_ms": round(ordered[-1], 1)}


async def _subscribe(rt: Runtime, run_id: Any, lags_ms: list[float]) -> None:
    hub = EventHub(rt.db, poll_s=rt.settings.api.events_poll_s)
    try:
        async for event in run_event_stream(hub, run_id, 0, 1.0):
            if event is None or event["type"] != "step_output":
                continue
            now = time.time()
            lags_ms.extend((now - float(line)) * 1000
                           for line in event["payload"]["text"].splitlines())
    finally:
        await hub.close()


async def latency(rt: Runtime) -> dict[str, Any]:
    submitted = await rt.submit(_plan("ticker", TICKER))
    lags_ms: list[float] = []
    listener = asyncio.create_task(_subscribe(rt, submitted.run_id, lags_ms))
    final = await rt.drive(submitted.run_id)
    await asyncio.sleep(1.0)  # the last events reach the subscriber
    listener.cancel()
    await asyncio.gather(listener, return_exceptions=True)
    return {"run_status": final["status"], "lines_printed": 50, **_summary(lags_ms)}


async def _wall_s(rt: Runtime, settings: Settings, max_bytes: int) -> float:
    settings.runtime.live_log_max_bytes = max_bytes
    started = time.perf_counter()
    final = await rt.run_plan(_plan("ten-mb", TEN_MB))
    assert final["status"] == "SUCCEEDED", final
    return time.perf_counter() - started


async def cost(rt: Runtime, settings: Settings) -> dict[str, Any]:
    cap = settings.runtime.live_log_max_bytes
    on: list[float] = []
    off: list[float] = []
    every: list[float] = []
    await _wall_s(rt, settings, 0)  # warm-up
    for _ in range(ROUNDS):
        off.append(await _wall_s(rt, settings, 0))
        on.append(await _wall_s(rt, settings, cap))
        every.append(await _wall_s(rt, settings, UNCAPPED))
    settings.runtime.live_log_max_bytes = cap
    ratio = statistics.median(on) / statistics.median(off)
    return {"printed_bytes": 10_000_000, "rounds": ROUNDS, "live_log_max_bytes": cap,
            "off_wall_s_median": round(statistics.median(off), 3),
            "on_wall_s_median": round(statistics.median(on), 3),
            "off_wall_s": [round(x, 3) for x in off], "on_wall_s": [round(x, 3) for x in on],
            "ratio": round(ratio, 3),
            "uncapped_wall_s_median": round(statistics.median(every), 3),
            "uncapped_ratio": round(statistics.median(every) / statistics.median(off), 3)}


async def main_async(out: Path) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="onebox-bench-logs-"))
    sandbox = SandboxSettings(backend="linux", pool_size=0, timeout_s=120)
    settings = load_settings(home=home, sandbox=sandbox, db_keep_running=False)
    settings.runtime.poll_s = 0.05
    try:
        async with await Runtime.open(settings) as rt:
            lat = await latency(rt)
            print("latency", json.dumps(lat))
            spent = await cost(rt, settings)
            print("cost", json.dumps(spent))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    report = {
        "benchmark": "live logs: print-to-subscriber latency and streaming cost (issue 14)",
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "settings": {"live_log_interval_s": settings.runtime.live_log_interval_s,
                     "events_poll_s": settings.api.events_poll_s},
        "target": {"latency_p50_ms_at_most": 500, "ratio_at_most": 1.2},
        "latency": lat, "cost_10mb": spent,
        "met": lat["p50_ms"] <= 500 and spent["ratio"] <= 1.2,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "logs.json")
    asyncio.run(main_async(parser.parse_args().out))


if __name__ == "__main__":
    main()
