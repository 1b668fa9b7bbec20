"""`onebox worker --alive-file`: what the Kubernetes liveness probe of a worker reads."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from onebox.config import Settings
from onebox.runtime.engine.worker import Worker
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database


async def test_a_serving_worker_keeps_touching_its_alive_file(
        db: Database, settings: Settings, backend: SandboxBackend, tmp_path: Path) -> None:
    settings.runtime.heartbeat_s = 0.2
    worker = Worker(db, backend, settings)
    worker.alive_file = alive = tmp_path / "worker-alive"
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop, drain_s=1))
    try:
        for _ in range(100):
            if alive.exists():
                break
            await asyncio.sleep(0.05)
        first = alive.stat().st_mtime_ns
        await asyncio.sleep(1.0)
        assert alive.stat().st_mtime_ns > first, "the file's age would grow past the probe"
        assert time.time() - alive.stat().st_mtime < 1.0
    finally:
        stop.set()
        await serving
