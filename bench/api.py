"""HTTP API latency on loopback: run submission, and one step event reaching 100 SSE subscribers.

Starts `onebox serve` (a subprocess, fresh ONEBOX_HOME, embedded PostgreSQL) and measures with
bounded loops. Writes bench/results/api.json.
Run: .venv/bin/python bench/api.py [--submissions 200] [--subscribers 100] [--events 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from onebox.config import load_settings
from onebox.store import runs as store
from onebox.store.db import Database

ROOT = Path(__file__).resolve().parents[1]
ONEBOX = str(Path(sys.executable).with_name("onebox"))
PLAN = {"name": "bench", "steps": [{"id": "noop", "tool": "python", "code": "pass"}]}


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return round(ordered[index], 2)


def summary(samples: list[float]) -> dict[str, Any]:
    return {"p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99),
            "max_ms": round(max(samples), 2), "n": len(samples)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def bench_submit(client: httpx.AsyncClient, n: int) -> dict[str, Any]:
    for _ in range(5):  # warm-up
        (await client.post("/v1/runs", json={"plan": PLAN})).raise_for_status()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        r = await client.post("/v1/runs", json={"plan": PLAN})
        samples.append((time.perf_counter() - start) * 1000)
        assert r.status_code == 201, r.text
    return summary(samples)


async def subscriber(client: httpx.AsyncClient, url: str, seen: dict[int, float],
                     ready: asyncio.Event, want: int) -> None:
    async with client.stream("GET", url) as response:
        got_initial = False
        async for line in response.aiter_lines():
            if line.startswith("event: bench_tick"):
                pass
            elif line.startswith("data: ") and '"bench_tick"' in line:
                payload = json.loads(line[6:])["payload"]
                seen[payload["i"]] = time.time()
                if len(seen) >= want:
                    return
            elif line.startswith("id: ") and not got_initial:
                got_initial = True
                ready.set()


async def bench_fanout(client: httpx.AsyncClient, db: Database, n_subs: int,
                       n_events: int) -> dict[str, Any]:
    run_id = (await client.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
    url = f"/v1/runs/{run_id}/events/stream"
    seen: list[dict[int, float]] = [{} for _ in range(n_subs)]
    readies = [asyncio.Event() for _ in range(n_subs)]
    tasks = [asyncio.create_task(subscriber(client, url, seen[i], readies[i], n_events))
             for i in range(n_subs)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
    sent: dict[int, float] = {}
    for i in range(n_events):
        async with db.transaction() as conn:
            await store.append_event(conn, run_id, "bench_tick", {"i": i}, trace_id=None)
        sent[i] = time.time()
        await asyncio.sleep(0.25)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    each = [(s[i] - sent[i]) * 1000 for s in seen for i in range(n_events)]
    last = [max(s[i] for s in seen) * 1000 - sent[i] * 1000 for i in range(n_events)]
    return {"per_subscriber": summary(each), "all_subscribers_reached": summary(last),
            "subscribers": n_subs, "events": n_events}


async def main_async(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    env = {**os.environ, "ONEBOX_HOME": str(home), "ONEBOX_LOG_LEVEL": "ERROR"}
    made = subprocess.run([ONEBOX, "keys", "create", "--tenant", "bench", "--json"], env=env,
                          capture_output=True, text=True, check=True)
    key = json.loads(made.stdout)["key"]
    port = free_port()
    server = subprocess.Popen([ONEBOX, "serve", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = await Database.open(load_settings(home=home))
    limits = httpx.Limits(max_connections=args.subscribers + 20)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits,
                                     headers={"Authorization": f"Bearer {key}"},
                                     timeout=60) as client:
            for _ in range(300):
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            submit = await bench_submit(client, args.submissions)
            fanout = await bench_fanout(client, db, args.subscribers, args.events)
    finally:
        await db.close()
        server.terminate()
        server.wait(timeout=30)
    return {"submit_run": submit, "sse_fanout": fanout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--events", type=int, default=30)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="onebox-bench-api-"))
    home.chmod(0o755)
    try:
        results = asyncio.run(main_async(args, home))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    out = {"benchmark": "api", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "load_avg_1m": round(os.getloadavg()[0], 2)},
           "settings": {"events_poll_s": load_settings().api.events_poll_s}, **results,
           "notes": "loopback; server = `onebox serve` subprocess on the embedded PostgreSQL; "
                    "submission = POST /v1/runs of a one-step plan (run row, plan, queued step, "
                    "events in one transaction); fan-out = an event appended the way the runtime "
                    "appends step events, timed until each of the SSE subscribers has parsed it"}
    path = ROOT / "bench" / "results" / "api.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
