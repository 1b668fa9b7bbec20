"""`onebox worker`: claim and run steps from the shared queue until SIGTERM, then drain."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import click

from onebox.cli import common
from onebox.config import Settings
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.service import Runtime


def register(main: click.Group) -> None:
    main.add_command(worker_cmd)


@click.command("worker")
@click.option("--concurrency", type=click.IntRange(1, 256), help="steps run at once "
              "(default: ONEBOX_RUNTIME__CONCURRENCY)")
@click.option("--drain-s", type=click.FloatRange(0), default=30.0, show_default=True,
              help="on SIGTERM, how long running steps may take to finish before their leases "
              "are released")
@click.option("--name", help="worker name recorded in leases and events (default host:pid:id)")
@click.option("--alive-file", type=click.Path(dir_okay=False, path_type=Path),
              help="touch this file on every heartbeat pass (runtime.heartbeat_s), for a "
              "liveness probe that reads its age")
def worker_cmd(concurrency: int | None, drain_s: float, name: str | None,
               alive_file: Path | None) -> None:
    """Run steps from the queue; any number of workers can share one database."""
    settings = common.settings()
    common.run(serve_worker(settings, concurrency=concurrency, drain_s=drain_s, name=name,
                            alive_file=alive_file))


async def serve_worker(settings: Settings, *, concurrency: int | None, drain_s: float,
                       name: str | None, alive_file: Path | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with await Runtime.open(settings) as rt:
        worker = Worker(rt.db, rt.backend, settings, concurrency=concurrency, name=name,
                        objects=rt.objects)
        worker.alive_file = alive_file
        common.err.print(f"worker {worker.owner} started (concurrency {worker.concurrency}, "
                         f"backend {rt.backend.name}); SIGTERM drains", markup=False)
        await worker.serve(stop, drain_s=drain_s)
        common.err.print(f"worker {worker.owner} stopped", markup=False)
