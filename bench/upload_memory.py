"""Server memory while uploads stream in: three concurrent 60 MiB E2B file writes.

Starts `onebox serve` (a subprocess, fresh ONEBOX_HOME, embedded PostgreSQL), makes three E2B
sandboxes, warms the upload path with one small write, then sends three 60 MiB
octet-stream bodies at once (chunked, from generators: the client holds one chunk) while
sampling the server's VmRSS every 10 ms. Reports the growth (peak - the RSS before the
uploads) and checks each file landed whole. Writes bench/results/upload_memory.json.
Run: .venv/bin/python bench/upload_memory.py [--mib 60] [--uploads 3]
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
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
ONEBOX = str(Path(sys.executable).with_name("onebox"))
CHUNK = 256 << 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRss:
    """The highest VmRSS of ``pid`` while running, sampled every 10 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._done = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, _rss_bytes(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


async def _body(size: int) -> AsyncIterator[bytes]:
    chunk = b"u" * CHUNK
    for _ in range(size // CHUNK):
        yield chunk


async def _upload(client: httpx.AsyncClient, sandbox: dict[str, str], size: int) -> int:
    headers = {"E2b-Sandbox-Id": sandbox["sandboxID"],
               "X-Access-Token": sandbox["envdAccessToken"],
               "Content-Type": "application/octet-stream"}
    answer = await client.post("/e2b/sandbox/files", params={"path": "/home/user/big.bin"},
                                content=_body(size), headers=headers)
    answer.raise_for_status()
    info = await client.post("/e2b/sandbox/filesystem.Filesystem/Stat",
                             json={"path": "/home/user/big.bin"},
                             headers={**headers, "Content-Type": "application/json"})
    return int(info.json()["entry"]["size"])


async def measure(url: str, key: str, pid: int, mib: int, uploads: int) -> dict[str, Any]:
    size = mib << 20
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        boxes = [(await client.post("/e2b/v2/sandboxes", json={},
                                    headers={"X-API-Key": key})).json() for _ in range(uploads)]
        await _upload(client, boxes[0], CHUNK)  # warm the path
        await asyncio.sleep(0.5)
        before = _rss_bytes(pid)
        started = time.perf_counter()
        with PeakRss(pid) as peak:
            sizes = await asyncio.gather(*(_upload(client, box, size) for box in boxes))
        seconds = time.perf_counter() - started
    if sizes != [size] * uploads:
        raise RuntimeError(f"the uploads did not land whole: {sizes}")
    return {"uploads": uploads, "upload_mib": mib, "rss_before_mib": round(before / 2**20, 1),
            "rss_peak_mib": round(peak.peak / 2**20, 1),
            "rss_growth_mib": round((peak.peak - before) / 2**20, 1),
            "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=60)
    parser.add_argument("--uploads", type=int, default=3)
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "upload_memory.json")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="onebox-bench-upload-"))
    home.chmod(0o755)
    env = {**os.environ, "ONEBOX_HOME": str(home), "ONEBOX_LOG_LEVEL": "ERROR",
           "ONEBOX_DB_KEEP_RUNNING": "false",
           "ONEBOX_API__MAX_CONCURRENT_UPLOADS_PER_TENANT": str(max(4, args.uploads))}
    server = None
    try:
        made = subprocess.run([ONEBOX, "keys", "create", "--tenant", "bench", "--json"],
                              env=env, capture_output=True, text=True, check=True)
        key = json.loads(made.stdout)["key"]
        port = _free_port()
        server = subprocess.Popen([ONEBOX, "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        results = asyncio.run(measure(url, key, server.pid, args.mib, args.uploads))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)
    out = {"benchmark": "upload_memory", **results,
           "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                       "load_avg_1m": round(os.getloadavg()[0], 2)},
           "notes": "loopback; `onebox serve` subprocess on the embedded PostgreSQL; each "
                    "upload is one chunked application/octet-stream body to E2B's POST "
                    "/files (a file object through the SDK), in its own sandbox; VmRSS of the "
                    "server process sampled every 10 ms"}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
