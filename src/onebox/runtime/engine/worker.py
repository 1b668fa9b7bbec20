"""A worker: claims ready attempts, runs them in the sandbox, archives them, keeps its leases alive.

Workers coordinate only through PostgreSQL, so any number of them on any number
of machines can share the queue. ``Worker.serve(stop)`` runs until ``stop`` is
set, then drains: no new claims, running steps get ``drain_s`` to finish, then
their leases are released for another worker to take.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg

from onebox.config import Settings
from onebox.errors import LeaseLost, OneboxError
from onebox.llm.base import ChatModel
from onebox.llm.registry import chat_model_from_settings
from onebox.objects.base import ObjectStore
from onebox.runtime.engine import kinds
from onebox.runtime.engine.archive import Outcome, archive_failure
from onebox.runtime.engine.executor import StepRunner
from onebox.runtime.engine.kinds import Performed, StepKind
from onebox.runtime.engine.queue import claim_steps, release_leases, renew_leases, sweep_expired
from onebox.runtime.engine.retention import RetentionChore
from onebox.runtime.engine.sessions import (
    reclaim_abandoned,
    release_copies_left_here,
    release_finished_sessions,
)
from onebox.runtime.engine.step_knowledge import StepKnowledge
from onebox.runtime.engine.tracing import bound, span
from onebox.runtime.engine.watchdog import flag_stale_runs
from onebox.runtime.engine.workspaces import StepWorkspace
from onebox.runtime.models.profiles import (
    endpoint_hints,
    llm_settings_for,
    model_key,
    needs_model,
    served_models,
)
from onebox.runtime.models.providers import DEFAULT, Provider, declared
from onebox.sandbox.base import SandboxBackend
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)

CHORES_EVERY_S = 5.0  # stale-run flags and cron schedules: seconds between checks
MODEL_CLIENTS = "onebox.llm.openai"  # the client module of every configured chat model


class Worker:
    def __init__(
        self,
        db: Database,
        backend: SandboxBackend,
        settings: Settings,
        *,
        concurrency: int | None = None,
        run_id: uuid.UUID | None = None,
        name: str | None = None,
        objects: ObjectStore | None = None,
        model: ChatModel | None = None,
    ) -> None:
        self.db, self.backend, self.settings = db, backend, settings
        self._model = model
        self._models: dict[str, ChatModel] = {}
        self._served: list[str] = []
        self._providers: dict[str, Provider] = {}
        self.workspaces = StepWorkspace(db, backend, objects, settings) if objects else None
        self.knowledge = StepKnowledge(db, settings)
        self.concurrency = concurrency or settings.runtime.concurrency
        self.run_id = run_id
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._running: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._rows: dict[uuid.UUID, store.Row] = {}
        self._exec_tasks: dict[uuid.UUID, asyncio.Task[Any]] = {}
        self._kind_tasks: dict[uuid.UUID, asyncio.Task[Performed]] = {}
        self._stop_reasons: dict[uuid.UUID, str] = {}
        self.runner = StepRunner(backend, settings, self.workspaces, self.knowledge,
                                 self._exec_tasks, self._stop_reasons, db=db)
        self.kind_worker = kinds.Worker(db, settings, backend, self.runner, self.chat_model)
        self._wake = asyncio.Event()
        # touched on every heartbeat pass: a liveness probe reads its age (`--alive-file`)
        self.alive_file: Path | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    async def serve(self, stop: asyncio.Event, *, drain_s: float = 30.0) -> None:
        """Claim and run steps until ``stop`` is set (or, with run_id, until that run ends)."""
        helpers = [asyncio.create_task(self._heartbeat(stop)), asyncio.create_task(self._listen())]
        if self.run_id is None:  # retention: a periodic pass, one worker at a time
            objects = self.workspaces.objects if self.workspaces else None
            helpers.append(asyncio.create_task(
                RetentionChore(self.db, self.settings, objects).loop()))
        try:
            await sweep_expired(self.db, self.settings)
            await reclaim_abandoned(self.db, self.backend)
            await self._refresh_served()
            await self._load_model_clients()
            while not stop.is_set():
                try:
                    await self._fill()
                    idle = not self._running
                    if self.run_id is not None and idle and await self._run_done():
                        await release_finished_sessions(self.db, self.backend, run_id=self.run_id,
                                                        keep=self.workspaces, wait_s=10.0)
                        break
                except psycopg.OperationalError as exc:
                    log.warning("database unavailable (%s); worker %s retries", exc, self.owner)
                await self._idle(stop)
        finally:
            for task in helpers:
                task.cancel()
            await self._drain(drain_s)
            await self._last_sweep()

    async def _last_sweep(self) -> None:
        """A stopping worker removes its host's copies of runs released meanwhile (a step
        fenced off after its host was cut off may have written one after the last chores)."""
        if self.run_id is not None:
            return
        try:
            await release_copies_left_here(self.db, self.backend, keep=self.workspaces)
        except (psycopg.Error, OneboxError, OSError) as exc:
            log.warning("worker %s could not sweep released copies while stopping: %s "
                        "(the next worker on this host does)", self.owner, exc)

    async def _fill(self) -> None:
        free = self.concurrency - len(self._running)
        for row in await claim_steps(self.db, self.settings, self.owner, free, run_id=self.run_id,
                                     models=self._served):
            self._rows[row["id"]] = row
            self._running[row["id"]] = asyncio.create_task(self._attempt(row))

    def chat_model(self, profile: Mapping[str, Any] | None = None) -> ChatModel:
        """The model for a run's profile (this worker's own model when the run has none).
        Models are kept per profile; a worker serves only a few, so the dict stays small."""
        key = needs_model(profile)
        if key is None or key in self._own_models():
            if self._model is None:
                self._model = chat_model_from_settings(self.settings.llm)
            return self._model
        assert profile is not None
        kept = f"{key} {profile.get('name') or ''}"  # a failure names the profile
        if kept not in self._models:
            model = chat_model_from_settings(
                llm_settings_for(profile, self.settings.llm, self._providers))
            model.hints = endpoint_hints(profile, self._providers)
            self._models[kept] = model
        return self._models[kept]

    def _own_models(self) -> set[str]:
        llm = self.settings.llm
        return {model_key(llm.model, DEFAULT)} if llm.model else set()

    async def _refresh_served(self) -> None:
        """The models this worker calls: its own and the stored profiles it has keys for."""
        async with self.db.connection() as conn:
            self._providers = await declared(conn, self.settings)
            self._served = await served_models(conn, self.settings, providers=self._providers)

    async def _load_model_clients(self) -> None:
        """Import the model clients this worker will call (``openai``: over a second of CPU)
        in a thread, before the first model call would import them on the loop that renews
        the leases: a fresh worker missed its heartbeats and lost leases while it lived."""
        if self._served:
            await asyncio.to_thread(importlib.import_module, MODEL_CLIENTS)

    async def _idle(self, stop: asyncio.Event) -> None:
        self._wake.clear()
        waiters = {asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())}
        await asyncio.wait(waiters, timeout=self.settings.runtime.poll_s,
                           return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()

    async def _run_done(self) -> bool:
        row = await self.db.fetchone("SELECT status FROM onebox.runs WHERE id = %s", (self.run_id,))
        return row is None or row["status"] in store.TERMINAL_RUN_STATES

    async def _attempt(self, row: store.Row) -> None:
        with bound(run_id=row["run_id"], step=row["step_id"], trace_id=row["trace_id"]), \
                span("step", row["trace_id"], run_id=row["run_id"], step_id=row["step_id"],
                     attempt=row["attempt"], worker=self.owner):
            await self._attempt_traced(row)

    async def _attempt_traced(self, row: store.Row) -> None:
        try:
            kind = kinds.kind_of(row)
            performed = await self._perform(kind, row)
            terminal = await self._archive(kind, row, performed)
            if terminal is not None or performed.outcome.error == "the run was cancelled":
                await release_finished_sessions(self.db, self.backend, run_id=row["run_id"],
                                                keep=self.workspaces)
        except LeaseLost as exc:
            log.warning("%s", exc)
        except (OneboxError, psycopg.Error) as exc:
            log.error("step %s of run %s could not be archived, not even as a failure: %s "
                      "(its lease will expire and the step will be retried)",
                      row["step_id"], row["run_id"], exc)
        finally:
            self._running.pop(row["id"], None)
            self._rows.pop(row["id"], None)
            self._stop_reasons.pop(row["id"], None)
            self._wake.set()

    async def _perform(self, kind: StepKind, row: store.Row) -> Performed:
        """Perform the attempt as its kind does; a failure around the work (preparing the
        workspace, a snapshot, the model provider) is a FAILED outcome with its reason, and
        an interruptible kind's attempt stopped by this worker is FAILED with the reason."""
        task = asyncio.create_task(kind.perform(self.kind_worker, row))
        if kind.interruptible:
            self._kind_tasks[row["id"]] = task
        try:
            return await task
        except LeaseLost:
            raise
        except asyncio.CancelledError:
            if not kind.interruptible or row["id"] not in self._stop_reasons:
                raise
            return Performed(None, Outcome("FAILED", error=self._stop_reasons[row["id"]]))
        except Exception as exc:
            log.exception("%s step %s of run %s could not run", kind.name, row["step_id"],
                          row["run_id"])
            return Performed(None, Outcome(
                "FAILED", error=f"could not run the step: {type(exc).__name__}: {exc}"))
        finally:
            self._kind_tasks.pop(row["id"], None)

    async def _archive(self, kind: StepKind, row: store.Row, performed: Performed) -> str | None:
        """Archive the attempt as its kind does; when that fails (a value the database
        refuses, a query error), archive the failure itself with its reason. Only a worker
        that really vanished leaves an attempt to expire."""
        try:
            return await kind.archive(self.kind_worker, row, performed)
        except LeaseLost:
            raise
        except Exception as exc:
            log.exception("%s step %s of run %s: the result could not be archived; recording "
                          "the attempt as FAILED", kind.name, row["step_id"], row["run_id"])
            failed = Performed(None, archive_failure(performed.outcome, exc))
            return await kind.archive(self.kind_worker, row, failed)

    async def _stop_step(self, execution_id: uuid.UUID, reason: str, *, cancelled: bool) -> None:
        """Stop a running attempt: a sandboxed one through the step pipeline (a cancelled
        run's step keeps the output it printed, or its result if it had finished), a model
        call or lookup by cancelling it."""
        row = self._rows.get(execution_id)
        if row is not None and execution_id in self._exec_tasks:
            await self.runner.stop(row, reason, interrupt=cancelled)
            return
        task = self._kind_tasks.get(execution_id)
        if task is not None and not task.done():
            self._stop_reasons[execution_id] = reason
            task.cancel()

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        """Renew leases and do the shared housekeeping every worker helps with."""
        interval = self.settings.runtime.heartbeat_s
        last_chores = 0.0
        while True:
            self._touch_alive()
            await asyncio.sleep(interval)
            try:
                await self._renew()
                await sweep_expired(self.db, self.settings)
                await release_finished_sessions(self.db, self.backend, keep=self.workspaces)
                if time.monotonic() - last_chores >= CHORES_EVERY_S:
                    last_chores = time.monotonic()
                    await self._chores()
            except (psycopg.Error, OneboxError) as exc:
                log.warning("heartbeat of worker %s failed: %s (retrying)", self.owner, exc)

    def _touch_alive(self) -> None:
        if self.alive_file is None:
            return
        try:
            self.alive_file.touch()
        except OSError as exc:  # a full disk: the probe will say so by restarting the pod
            log.warning("worker %s could not touch %s: %s", self.owner, self.alive_file, exc)

    async def _chores(self) -> None:
        """Every few seconds: the models this worker serves; stale runs and due schedules
        (a worker serving the whole queue, not a foreground one for a single run)."""
        await self._refresh_served()
        if self.run_id is None:
            await flag_stale_runs(self.db, self.settings)
            await release_copies_left_here(self.db, self.backend, keep=self.workspaces)
            await reclaim_abandoned(self.db, self.backend)
            for name, chore in kinds.chores().items():
                try:
                    if await chore(self.db, self.settings):
                        self._wake.set()
                except (psycopg.Error, OneboxError) as exc:
                    log.warning("chore %s of worker %s failed: %s (retried on the next round)",
                                name, self.owner, exc)

    async def _renew(self) -> None:
        """Stop steps whose run was cancelled or whose lease was lost."""
        ids = list(self._rows)
        held = await renew_leases(self.db, self.settings, self.owner, ids)
        stops = []
        for execution_id in ids:
            status = held.get(execution_id)
            if status is None:
                stops.append(self._stop_step(execution_id, "lease lost to another worker",
                                             cancelled=False))
            elif status == "CANCELLED":
                stops.append(self._stop_step(execution_id, "the run was cancelled",
                                             cancelled=True))
        await asyncio.gather(*stops)

    async def _listen(self) -> None:
        """LISTEN for newly queued steps so idle workers wake at once instead of polling."""
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.db.url, autocommit=True) as conn:
                    await conn.execute("LISTEN onebox_steps")
                    async for _ in conn.notifies():
                        self._wake.set()
            except psycopg.Error as exc:
                log.info("LISTEN connection lost (%s); polling until it is back", exc)
                await asyncio.sleep(self.settings.runtime.poll_s)

    async def _drain(self, drain_s: float) -> None:
        await self.knowledge.close()
        if not self._running:
            return
        log.info("draining: waiting up to %.0f s for %d running step(s)", drain_s, len(self._running))
        _, pending = await asyncio.wait(list(self._running.values()), timeout=drain_s)
        if pending:
            ids = list(self._rows)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await release_leases(self.db, self.owner, ids)
            log.warning("released %d lease(s) of steps that did not finish in time", len(ids))
