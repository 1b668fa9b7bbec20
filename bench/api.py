"""HTTP API latency on loopback: run submission, one step event reaching 100 SSE subscribers, and
live delivery to 50 subscribers while 20 other clients submit runs as fast as they can.

Starts `onebox serve` (a subprocess, fresh ONEBOX_HOME, embedded PostgreSQL) and measures with
bounded loops. The submitting clients run in a second process (as real clients would), so the
subscribers' clock is not delayed by their work. Writes bench/results/api.json.
Run: .venv/bin/python bench/api.py [--submissions 200] [--subscribers 100] [--events 30]
     [--loaded-subscribers 50] [--submitters 20] [--loaded-events 60] [--only-loaded]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
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
    return {"p50_ms": percentile(samples, 50), "p95_ms": percentile(samples, 95),
            "p99_ms": percentile(samples, 99), "max_ms": round(max(samples), 2), "n": len(samples)}


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


async def submit_forever(url: str, key: str, stop: asyncio.Event, samples: list[float]) -> None:
    """One client submitting runs back to back (its own connection) until ``stop``."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"},
                                 timeout=60) as client:
        while not stop.is_set():
            start = time.perf_counter()
            r = await client.post("/v1/runs", json={"plan": PLAN})
            samples.append((time.perf_counter() - start) * 1000)
            assert r.status_code == 201, r.text


async def submit_load(url: str, key: str, clients: int) -> None:
    """The submitting clients' process: submit until SIGTERM, then print their latencies."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    samples: list[float] = []
    await asyncio.gather(*(submit_forever(url, key, stop, samples) for _ in range(clients)))
    print(json.dumps(summary(samples)))


def start_submitters(url: str, key: str, clients: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, "--submit-load", url, key, str(clients)],
                            stdout=subprocess.PIPE, text=True)


async def tick_runs(db: Database, run_ids: list[str], n_events: int) -> dict[int, float]:
    """Tick i goes to run i % len(run_ids), ~10 a second; returns when each was committed."""
    sent: dict[int, float] = {}
    for i in range(n_events):
        async with db.transaction() as conn:
            await store.append_event(conn, run_ids[i % len(run_ids)], "bench_tick", {"i": i},
                                     trace_id=None)
        sent[i] = time.time()
        await asyncio.sleep(0.1)
    return sent


async def bench_loaded(client: httpx.AsyncClient, db: Database, url: str, key: str,
                       args: argparse.Namespace) -> dict[str, Any]:
    """Live delivery to ``loaded_subscribers`` streams (over 5 runs) while ``submitters``
    other clients submit runs back to back: commit of an event -> parsed by a subscriber."""
    n_runs, n_subs, n_events = 5, args.loaded_subscribers, args.loaded_events
    runs = [(await client.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
            for _ in range(n_runs)]
    want = [len(range(i % n_runs, n_events, n_runs)) for i in range(n_subs)]
    seen: list[dict[int, float]] = [{} for _ in range(n_subs)]
    readies = [asyncio.Event() for _ in range(n_subs)]
    tasks = [asyncio.create_task(subscriber(client, f"/v1/runs/{runs[i % n_runs]}/events/stream",
                                            seen[i], readies[i], want[i]))
             for i in range(n_subs)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
    load = start_submitters(url, key, args.submitters)
    await asyncio.sleep(2.0)  # the submitters are up to speed before the first tick
    sent = await tick_runs(db, runs, n_events)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    load.terminate()
    out, _ = load.communicate(timeout=60)
    each = [(got - sent[i]) * 1000 for s in seen for i, got in s.items()]
    return {"delivery": summary(each), "subscribers": n_subs, "runs": n_runs,
            "events": n_events, "submitters": args.submitters,
            "submit_run_under_load": json.loads(out)}


async def main_async(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    env = {**os.environ, "ONEBOX_HOME": str(home), "ONEBOX_LOG_LEVEL": "ERROR"}
    made = subprocess.run([ONEBOX, "keys", "create", "--tenant", "bench", "--json"], env=env,
                          capture_output=True, text=True, check=True)
    key = json.loads(made.stdout)["key"]
    port = free_port()
    server = subprocess.Popen([ONEBOX, "serve", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    db = await Database.open(load_settings(home=home))
    limits = httpx.Limits(max_connections=max(args.subscribers, args.loaded_subscribers) + 20)
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
            results: dict[str, Any] = {}
            if not args.only_loaded:
                results["submit_run"] = await bench_submit(client, args.submissions)
                results["sse_fanout"] = await bench_fanout(client, db, args.subscribers,
                                                           args.events)
            results["sse_delivery_under_load"] = await bench_loaded(
                client, db, f"http://127.0.0.1:{port}", key, args)
    finally:
        await db.close()
        server.terminate()
        server.wait(timeout=30)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--loaded-subscribers", type=int, default=50)
    parser.add_argument("--submitters", type=int, default=20)
    parser.add_argument("--loaded-events", type=int, default=100)
    parser.add_argument("--only-loaded", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "api.json")
    parser.add_argument("--submit-load", nargs=3, metavar=("URL", "KEY", "CLIENTS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.submit_load:
        url, key, clients = args.submit_load
        asyncio.run(submit_load(url, key, int(clients)))
        return
    load_before = round(os.getloadavg()[0], 2)  # other work on the machine skews the tails
    home = Path(tempfile.mkdtemp(prefix="onebox-bench-api-"))
    home.chmod(0o755)
    try:
        results = asyncio.run(main_async(args, home))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    out = {"benchmark": "api", "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                                           "load_avg_1m_before": load_before,
                                           "load_avg_1m": round(os.getloadavg()[0], 2)},
           "settings": {"events_poll_s": load_settings().api.events_poll_s}, **results,
           "notes": "loopback; server = `onebox serve` subprocess on the embedded PostgreSQL; "
                    "submission = POST /v1/runs of a one-step plan (run row, plan, queued step, "
                    "events in one transaction); fan-out = an event appended the way the runtime "
                    "appends step events, timed until each of the SSE subscribers has parsed it; "
                    "delivery under load = the same, 50 subscribers over 5 runs, while 20 "
                    "clients in another process submit runs back to back"}
    path = args.out
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
