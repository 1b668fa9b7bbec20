"""A real onebox worker that freezes at a chosen point, so a test can kill -9 it right there.

    python chaos_worker.py --pause-at after_claim|before_archive|after_archive --step s2

It writes a line to --marker when it reaches the point, then blocks the whole process.
Without --pause-at it is a plain worker. Settings come from the environment as usual.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from onebox.cli.worker import serve_worker
from onebox.config import load_settings
from onebox.runtime.engine import code_steps
from onebox.runtime.engine import worker as worker_module


def freeze(marker: Path, point: str) -> None:
    marker.write_text(point + "\n")
    time.sleep(3600)  # blocks the event loop: no heartbeat, no progress, as if hung or killed


def install(point: str, step: str, marker: Path) -> None:
    real_claim, real_archive = worker_module.claim_steps, code_steps.archive_step

    async def claim(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        rows = await real_claim(*args, **kwargs)
        if point == "after_claim" and any(r["step_id"] == step for r in rows):
            freeze(marker, point)
        return rows

    async def archive(db: Any, settings: Any, claimed: dict[str, Any], outcome: Any) -> Any:
        if claimed["step_id"] == step and point == "before_archive":
            freeze(marker, point)
        result = await real_archive(db, settings, claimed, outcome)
        if claimed["step_id"] == step and point == "after_archive":
            freeze(marker, point)
        return result

    worker_module.claim_steps = claim  # type: ignore[assignment]
    code_steps.archive_step = archive  # type: ignore[assignment]  # the code kind archives


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pause-at", choices=["after_claim", "before_archive", "after_archive"])
    parser.add_argument("--step", default="s2")
    parser.add_argument("--marker", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    if args.pause_at:
        install(args.pause_at, args.step, args.marker)
    args.marker.write_text("started\n")
    asyncio.run(serve_worker(load_settings(), concurrency=args.concurrency, drain_s=1, name="chaos"))


if __name__ == "__main__":
    main()
