"""The runtime as one object: the database and the sandbox backend, opened together.

    async with await Runtime.open(settings) as rt:
        final = await rt.run_plan(plan)
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from onebox.agent.plan import Plan
from onebox.config import Settings
from onebox.objects.base import ObjectStore
from onebox.objects.registry import get_object_store
from onebox.runtime.engine.submit import Submitted
from onebox.runtime.engine.tracing import bound, span
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.runs import get_run
from onebox.runtime.services.submission import submit_plan
from onebox.sandbox.base import SandboxBackend
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)

Progress = Callable[[uuid.UUID], Awaitable[None]]


class Runtime:
    def __init__(self, settings: Settings, db: Database, backend: SandboxBackend,
                 objects: ObjectStore | None = None) -> None:
        self.settings, self.db, self.backend = settings, db, backend
        self.objects = objects if objects is not None else get_object_store(settings)

    @classmethod
    async def open(cls, settings: Settings, *, backend: SandboxBackend | None = None) -> Runtime:
        from onebox.sandbox.registry import get_backend

        db = await Database.open(settings)
        try:
            return cls(settings, db, backend or get_backend(settings))
        except BaseException:
            await db.close()
            raise

    async def close(self) -> None:
        await self.backend.close()
        await self.db.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def submit(self, plan: Plan, **kwargs: Any) -> Submitted:
        return await submit_plan(self.db, self.settings, plan, **kwargs)

    async def drive(self, run_id: uuid.UUID, *, progress: Progress | None = None,
                    stop: asyncio.Event | None = None, drain_s: float = 30.0) -> store.Row:
        """Work on one run in this process until it reaches a terminal state, or until
        ``stop`` is set (steps still running get ``drain_s`` to finish, then their leases
        go back for any worker to take); return the run."""
        worker = Worker(self.db, self.backend, self.settings, run_id=run_id, objects=self.objects)
        stop = stop or asyncio.Event()
        run = await get_run(self.db, run_id)
        watcher = asyncio.create_task(_watch(progress, run_id)) if progress else None
        try:
            with bound(run_id=run_id, trace_id=run["trace_id"]), \
                    span("run", run["trace_id"], run_id=run_id, run_name=run["name"]):
                await worker.serve(stop, drain_s=drain_s)
        finally:
            if watcher is not None:
                watcher.cancel()
        if progress is not None:
            await progress(run_id)
        return await get_run(self.db, run_id)

    async def run_plan(self, plan: Plan, *, progress: Progress | None = None, **kwargs: Any) -> store.Row:
        submitted = await self.submit(plan, **kwargs)
        return await self.drive(submitted.run_id, progress=progress)


async def _watch(progress: Progress, run_id: uuid.UUID, interval_s: float = 0.2) -> None:
    while True:
        await progress(run_id)
        await asyncio.sleep(interval_s)
