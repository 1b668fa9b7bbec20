"""Driving runs in integration tests: workers serve until the run ends."""

from __future__ import annotations

import asyncio
import uuid

from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import runs as runs_api
from onebox.store.db import Database

ENDED = ("SUCCEEDED", "FAILED", "DEAD", "CANCELLED")


async def serve_until_ended(workers: list[Worker], db: Database, run_id: uuid.UUID, *,
                            seen: list[str] | None = None, timeout_s: float = 60.0) -> None:
    """Serve the queue with ``workers`` until the run ends (or ``timeout_s``), then drain.
    ``seen`` collects each polled "STATUS|error", to check the states the run went through."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(w.serve(stop, drain_s=5)) for w in workers]
    try:
        for _ in range(int(timeout_s / 0.05)):
            run = await runs_api.get_run(db, run_id)
            if seen is not None:
                seen.append(run["status"] + ("|" + run["error"] if run["error"] else ""))
            if run["status"] in ENDED:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
