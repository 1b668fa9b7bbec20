"""A step's workspace around its execution: restored when missing or stale, snapshotted
before and after.

All steps of a run share one sandbox session. When a step is about to run and the
session's workspace is not on this host (the run was retried after its session was
released, or a worker on another machine took it over) but the session has snapshots,
the newest one is restored first, so the step sees the files earlier steps wrote.

A workspace that *is* here may be stale: a later step ran on another host and left a newer
snapshot. Each host notes, per session, the snapshots it takes (before their rows exist) and
the one its copy last matched (a file under the sandbox state dir, out of the sandbox's
reach). When the session's newest snapshot is neither one it took nor the one it matched,
and is newer than that one, the copy here is replaced by a restore of it (a
``workspace_restored`` event with ``reason: stale``). This holds with
``snapshot_policy: always``; with fewer snapshots a later host has nothing newer to restore.
Snapshots follow ``settings.snapshot_policy``; a snapshot that cannot be taken (a
workspace past a bound: entries, depth, time or apparent bytes) is recorded as a
``snapshot_failed`` event naming the bound, and does not fail the step.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any

from onebox.config import Settings
from onebox.errors import NotFound, OneboxError
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
MARKS_DIR = "workspace-marks"


class StepWorkspace:
    """The snapshot and restore duties of one worker, over one object store."""

    def __init__(self, db: Database, backend: SandboxBackend, objects: ObjectStore,
                 settings: Settings) -> None:
        self.db, self.backend, self.objects, self.settings = db, backend, objects, settings
        self.marks = settings.sandbox_dir / MARKS_DIR

    async def prepare(self, row: store.Row) -> None:
        """Restore the session's newest snapshot if its workspace is missing here, or if
        the copy here is not the newest (see the module)."""
        session_id = row["session_id"]
        here = self.backend.workspace(session_id).exists()
        latest = await self._latest(session_id)
        if here and (latest is None or await self._current(session_id, latest)):
            return
        if latest is None:  # a new workspace: the run's input files go in first
            placed = await run_files.place_inputs(self.db, self.objects, self.backend, row)
            if placed:
                await self._event(row, "inputs_placed", {"files": placed})
            return
        if here:  # a newer snapshot was taken elsewhere: the copy here is stale
            await self.backend.cleanup(session_id)
        await restore_into_session(self.db, self.objects, self.backend, latest["id"],
                                   session_id=session_id)
        self._mark(session_id, latest["id"])
        await self._event(row, "workspace_restored", {
            "snapshot_id": str(latest["id"]), "sha256": str(latest["sha256"]).strip(),
            **({"reason": "stale"} if here else {})})
        log.info("restored workspace of %s from snapshot %s%s", session_id, latest["id"],
                 " (the copy here was stale)" if here else "")

    async def _latest(self, session_id: str) -> store.Row | None:
        async with self.db.connection() as conn:
            return await snapshot_rows.latest_before(conn, session_id, dt.datetime.now(dt.UTC))

    async def _current(self, session_id: str, latest: store.Row) -> bool:
        """Whether the copy here is at least as new as the session's newest snapshot: this
        host took it (its id was noted before its row existed, so a step of this host
        snapshotting beside this one never looks like another host's), or it is the one
        last marked, or older than that. A copy with no notes (made before they existed),
        or whose marked snapshot is gone (dropped by ``on_failure``, expired), is taken as
        current."""
        ours, seen = self._notes(session_id)
        latest_id = str(latest["id"])
        if latest_id in ours or latest_id == seen:
            return True
        if seen is not None:
            async with self.db.connection() as conn:
                try:
                    marked = await snapshot_rows.get(conn, seen)
                except NotFound:
                    marked = None
            if marked is not None and latest["created_at"] > marked["created_at"]:
                return False
        self._mark(session_id, latest["id"])
        return True

    def _mark_path(self, session_id: str) -> Path:
        return self.marks / hashlib.sha256(session_id.encode()).hexdigest()[:32]

    def _notes(self, session_id: str) -> tuple[set[str], str | None]:
        """The snapshots this host took of the session, and the one its copy last matched."""
        try:
            lines = self._mark_path(session_id).read_text().split("\n")
        except FileNotFoundError:
            return set(), None
        ours = {line[5:] for line in lines if line.startswith("ours ")}
        seen = [line[5:] for line in lines if line.startswith(("seen ", "ours "))]
        return ours, (seen[-1] if seen else None)

    def _note(self, session_id: str, kind: str, snapshot_id: Any) -> None:
        """Append one line (``ours ID``: this host is taking it; ``seen ID``: the copy here
        matches it); a small O_APPEND write, so the workers of a host can share the file."""
        self.marks.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self._mark_path(session_id),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, f"{kind} {snapshot_id}\n".encode())
        finally:
            os.close(fd)

    def _mark(self, session_id: str, snapshot_id: Any) -> None:
        self._note(session_id, "seen", snapshot_id)

    def forget(self, session_id: str) -> None:
        """The session's copy here is gone (released): its notes go too."""
        with contextlib.suppress(FileNotFoundError):
            self._mark_path(session_id).unlink()

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
        new_id = uuid.uuid4()
        self._note(row["session_id"], "ours", new_id)  # before its row exists: see _current
        try:
            if pre:
                taken = await snapshot_before_step(self.db, self.objects, workspace, **ids,
                                                   snapshot_id=new_id)
            else:
                taken = await snapshot_step(self.db, self.objects, workspace, failed=failed,
                                            snapshot_id=new_id, **ids)
            if taken is not None and taken != new_id:  # an identical one, reused
                self._mark(row["session_id"], taken)
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
