"""E2B compatibility overhead: a `run_code("x + 1")` round trip through the unmodified E2B
SDK against `onebox serve`, side by side with the same call through onebox's sessions API
(POST /v1/sessions/{id}/execute, python in the same stateful interpreter).

Starts `onebox serve` (a subprocess, fresh ONEBOX_HOME, embedded PostgreSQL), makes one
sandbox through the SDK and one session through the API, warms both, then times N calls of
each, alternating in blocks of 20 so drift on the machine hits both alike. Both clients are
synchronous, in this process, over loopback. Writes bench/results/e2b.json.
Run: .venv/bin/python bench/e2b_compat.py [--n 300]
(Not bench/e2b.py: a module named e2b beside the scripts would shadow the SDK.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
ONEBOX = str(Path(sys.executable).with_name("onebox"))
BLOCK = 20


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
            "min_ms": round(ordered[0], 2), "max_ms": round(ordered[-1], 2)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _wait_ready(url: str) -> None:
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("onebox serve did not start")


def measure(url: str, key: str, n: int) -> dict[str, Any]:
    os.environ.update({"E2B_API_URL": f"{url}/e2b", "E2B_SANDBOX_URL": f"{url}/e2b/sandbox",
                       "E2B_API_KEY": key})
    from e2b_code_interpreter import Sandbox

    sbx = Sandbox.create()
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    session = client.post("/v1/sessions").json()["id"]

    def e2b_call() -> None:
        if sbx.run_code("x + 1").text != "42":
            raise RuntimeError("the E2B call did not answer 42")

    def api_call() -> None:
        body = client.post(f"/v1/sessions/{session}/execute", json={"code": "x + 1"}).json()
        if body["results"][0]["data"]["text/plain"] != "42":
            raise RuntimeError(f"the sessions API did not answer 42: {body}")

    try:
        sbx.run_code("x = 41")
        client.post(f"/v1/sessions/{session}/execute", json={"code": "x = 41"})
        for _ in range(BLOCK):
            e2b_call()
            api_call()
        e2b, api = [], []
        for _ in range(max(1, n // BLOCK)):
            e2b += [_timed(e2b_call) for _ in range(BLOCK)]
            api += [_timed(api_call) for _ in range(BLOCK)]
    finally:
        sbx.kill()
        client.delete(f"/v1/sessions/{session}")
        client.close()
    e2b_stats, api_stats = _stats(e2b), _stats(api)
    return {"e2b_sdk_run_code": e2b_stats, "sessions_api_execute": api_stats,
            "e2b_overhead_p50_ms": round(e2b_stats["p50_ms"] - api_stats["p50_ms"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "e2b.json")
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    home = Path(tempfile.mkdtemp(prefix="onebox-bench-e2b-"))
    home.chmod(0o755)
    env = {**os.environ, "ONEBOX_HOME": str(home), "ONEBOX_LOG_LEVEL": "ERROR"}
    server = None
    try:
        made = subprocess.run([ONEBOX, "keys", "create", "--tenant", "bench", "--json"],
                              env=env, capture_output=True, text=True, check=True)
        key = json.loads(made.stdout)["key"]
        port = _free_port()
        server = subprocess.Popen([ONEBOX, "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url)
        results = measure(url, key, args.n)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
    out = {"benchmark": "e2b", **results,
           "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                       "load_avg_1m_before": load_before,
                       "load_avg_1m": round(os.getloadavg()[0], 2)},
           "notes": "loopback; `onebox serve` subprocess on the embedded PostgreSQL; both "
                    "calls run `x + 1` in a warm session's stateful interpreter and check the "
                    "answer 42; E2B = e2b_code_interpreter.Sandbox.run_code (NDJSON stream via "
                    "E2B_SANDBOX_URL, tenant check by the envd access token), sessions API = "
                    "POST /v1/sessions/{id}/execute (JSON), each with a sync client and a "
                    "kept-alive connection; alternating blocks of 20"}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
