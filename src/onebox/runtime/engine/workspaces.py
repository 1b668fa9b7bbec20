"""A step's workspace around its execution: restored when missing, snapshotted before and after.

All steps of a run share one sandbox session. When a step is about to run and the
session's workspace is not on this host (the run was retried after its session was
released, or a worker on another machine took it over) but the session has snapshots,
the newest one is restored first, so the step sees the files earlier steps wrote.
Snapshots follow ``settings.snapshot_policy``; a snapshot that cannot be taken (a
workspace past a bound: entries, depth, time or apparent bytes) is recorded as a
``snapshot_failed`` event naming the bound, and does not fail the step.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from onebox.config import Settings
from onebox.errors import OneboxError
from onebox.objects.base import ObjectStore
from onebox.runtime.engine import run_files, run_outputs
from onebox.sandbox import hostfs
from onebox.sandbox.base import SandboxBackend
from onebox.snapshots.archive import snapshot_before_step, snapshot_step
from onebox.snapshots.replay import restore_into_session
from onebox.store import runs as store
from onebox.store import snapshots as snapshot_rows
from onebox.store.db import Database

log = logging.getLogger(__name__)


class StepWorkspace:
    """The snapshot and restore duties of one worker, over one object store."""

    def __init__(self, db: Database, backend: SandboxBackend, objects: ObjectStore,
                 settings: Settings) -> None:
        self.db, self.backend, self.objects, self.settings = db, backend, objects, settings

    async def prepare(self, row: store.Row) -> None:
        """Restore the session's newest snapshot if its workspace is missing here."""
        session_id = row["session_id"]
        if self.backend.workspace(session_id).exists():
            return
        async with self.db.connection() as conn:
            latest = await snapshot_rows.latest_before(conn, session_id, dt.datetime.now(dt.UTC))
        if latest is None:  # a new workspace: the run's input files go in first
            placed = await run_files.place_inputs(self.db, self.objects, self.backend, row)
            if placed:
                await self._event(row, "inputs_placed", {"files": placed})
            return
        await restore_into_session(self.db, self.objects, self.backend, latest["id"],
                                   session_id=session_id)
        await self._event(row, "workspace_restored", {"snapshot_id": str(latest["id"]),
                                                      "sha256": str(latest["sha256"]).strip()})
        log.info("restored workspace of %s from snapshot %s", session_id, latest["id"])

    async def keep_outputs(self, session: store.Row) -> None:
        """Copy the finished run's outputs to the object store before its workspace goes;
        a failure is an ``outputs_failed`` event, never a stuck release."""
        try:
            await run_outputs.keep_outputs(self.db, self.objects, self.backend, session,
                                           self.settings.runtime)
        except (OneboxError, OSError) as exc:
            log.warning("keeping the outputs of run %s failed: %s", session["run_id"], exc)
            async with self.db.transaction() as conn:
                await store.append_event(conn, session["run_id"], "outputs_failed",
                                         {"error": str(exc)}, trace_id=session["trace_id"],
                                         session_id=session["id"])

    async def before(self, row: store.Row) -> None:
        await self._snapshot(row, pre=True, failed=False)

    async def after(self, row: store.Row, *, failed: bool) -> None:
        await self._snapshot(row, pre=False, failed=failed)

    async def _snapshot(self, row: store.Row, *, pre: bool, failed: bool) -> None:
        policy = self.settings.snapshot_policy
        workspace = self.backend.workspace(row["session_id"])
        if policy == "never" or not workspace.exists():
            return
        ids = {"session_id": row["session_id"], "execution_id": row["id"], "policy": policy}
        try:
            if pre:
                await snapshot_before_step(self.db, self.objects, workspace, **ids)
            else:
                await snapshot_step(self.db, self.objects, workspace, failed=failed, **ids)
        except (OneboxError, OSError) as exc:
            log.warning("snapshot of step %s failed: %s", row["step_id"], exc)
            bound = exc.__cause__ if isinstance(exc.__cause__, hostfs.BoundExceeded) else None
            await self._event(row, "snapshot_failed", {
                "when": "before" if pre else "after", "error": str(exc),
                **({"bound": bound.bound, "limit": bound.limit} if bound else {})})

    async def _event(self, row: store.Row, kind: str, payload: dict[str, Any]) -> None:
        async with self.db.transaction() as conn:
            await store.append_event(conn, row["run_id"], kind, {"step_id": row["step_id"],
                                                                 **payload},
                                     trace_id=row["trace_id"], session_id=row["session_id"],
                                     execution_id=row["id"])
