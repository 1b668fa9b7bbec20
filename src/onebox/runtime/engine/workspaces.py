"""A step's workspace around its execution: brought up to date, snapshotted before and
after, and its changes committed onto the session's newest state.

All steps of a run share one sandbox session; each host that runs some of them keeps a copy
of its workspace. The session's *head* is its newest snapshot that is not a step's 'pre'.

**Before a step** (:meth:`StepWorkspace.prepare`): a host with no copy restores the head. A
host whose copy is behind the head (a newer commit another host made) restores it when the
step needs it: when one of the steps it depends on committed elsewhere after the copy was
last brought up to date (or, for a step whose dependencies are not known, whenever the copy
is behind). The restore waits until no other step of the session runs on this host
(:mod:`copy_locks`), so it never pulls files from under a running step. It is recorded as a
``workspace_restored`` event (``reason: missing`` or ``stale``). A step that needs nothing
the copy lacks runs on it as it is: parallel branches do not wait for each other.

Each host notes, per session, the snapshots it takes (before their rows exist) and the one
its copy last matched (a file under the sandbox state dir, out of the sandbox's reach).

**After a step** (:func:`onebox.snapshots.archive.commit_step`): its 'post' snapshot is the
new head when the head is what the step started from (its 'pre' has the head's content);
otherwise (a step elsewhere committed meanwhile, or the copy was behind) the step's own
changes, 'pre' to 'post', are merged onto the head as a 'merge' snapshot (a ``workspace_merged`` event, naming any path
both changed: the later commit wins). So steps of one run may run in parallel on several
hosts and a step after them sees every one's files. This holds with ``snapshot_policy:
always``; with fewer snapshots a later host has less to restore. A snapshot that cannot be
taken (a workspace past a bound: entries, depth, time or apparent bytes) is recorded as a
``snapshot_failed`` event naming the bound, and does not fail the step.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from onebox.config import Settings
from onebox.errors import NotFound, OneboxError
from onebox.objects.base import ObjectStore
from onebox.runtime.engine import run_files, run_outputs
from onebox.runtime.engine.copy_locks import CopyLocks
from onebox.sandbox import hostfs
from onebox.sandbox.base import SandboxBackend
from onebox.snapshots.archive import (
    UNKNOWN,
    commit_step,
    snapshot_before_step,
    snapshot_step,
)
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
        self.locks = CopyLocks(self.marks / "locks")
        self._pre: dict[uuid.UUID, uuid.UUID | None] = {}  # execution -> its 'pre' snapshot

    @contextlib.asynccontextmanager
    async def using(self, row: store.Row) -> AsyncIterator[None]:
        """Around a step's execution: bring the copy up to date, hold it (shared with the
        session's other steps on this host) and take the 'before' snapshot; the caller
        takes the 'after' one (:meth:`after`) inside."""
        await self.prepare(row)
        try:
            async with self.locks.shared(row["session_id"]):
                await self.before(row)
                yield
        finally:
            self._pre.pop(row["id"], None)

    async def prepare(self, row: store.Row) -> None:
        """Restore the session's head if its workspace is missing here, or if the copy here
        lacks what this step needs (see the module)."""
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
        if here and not await self._needs_newer(row, session_id):
            return  # behind other branches' commits, none of which this step depends on
        async with self.locks.exclusive(session_id):  # no step of it runs here meanwhile
            latest = await self._latest(session_id) or latest
            here = self.backend.workspace(session_id).exists()
            if here and await self._current(session_id, latest):
                return  # another step of this host brought it up to date while we waited
            if here:  # the copy here is stale
                await self.backend.cleanup(session_id)
            await restore_into_session(self.db, self.objects, self.backend, latest["id"],
                                       session_id=session_id)
            self._mark(session_id, latest["id"])
        await self._event(row, "workspace_restored", {
            "snapshot_id": str(latest["id"]), "sha256": str(latest["sha256"]).strip(),
            "reason": "stale" if here else "missing"})
        log.info("restored workspace of %s from snapshot %s%s", session_id, latest["id"],
                 " (the copy here was stale)" if here else "")

    async def _latest(self, session_id: str) -> store.Row | None:
        async with self.db.connection() as conn:
            return await snapshot_rows.latest_commit(conn, session_id)

    async def _needs_newer(self, row: store.Row, session_id: str) -> bool:
        """Whether a step this one depends on (directly or not) committed something the copy
        here lacks: it ran on another host, after the copy was last brought up to date.
        Unknown dependencies (a step not in its plan): yes."""
        deps = await self._dependencies(row)
        if deps is None:
            return True
        if not deps:
            return False
        ours, seen = self._notes(session_id)
        seen_at = await self._committed_at(seen)
        async with self.db.connection() as conn:
            commits = await snapshot_rows.dependency_commits(conn, row["run_id"], deps)
        for commit in commits:
            if commit["post_id"] is not None and str(commit["post_id"]) in ours | {seen}:
                continue  # it ran here (or its post is what this copy was restored from)
            if seen_at is None or (commit["committed_at"] is not None
                                   and commit["committed_at"] > seen_at):
                return True
        return False

    async def _dependencies(self, row: store.Row) -> list[str] | None:
        """Every step this one depends on, directly or through others (an approval between
        two steps passes on what the first wrote); None when the step is not in its plan."""
        async with self.db.connection() as conn:
            found = await store.fetch_one(conn, "plan_by_id", {"plan_id": row.get("plan_id")})
        steps = (found["spec"] or {}).get("steps") if found is not None else None
        if not isinstance(steps, list):
            return None
        needs = {str(s.get("id")): [str(d) for d in s.get("depends_on") or []]
                 for s in steps if isinstance(s, dict)}
        if row["step_id"] not in needs:
            return None
        ancestors: set[str] = set()
        todo = list(needs[row["step_id"]])
        while todo:
            step = todo.pop()
            if step not in ancestors:
                ancestors.add(step)
                todo.extend(needs.get(step, []))
        return sorted(ancestors)

    async def _committed_at(self, snapshot_id: str | None) -> dt.datetime | None:
        if snapshot_id is None:
            return None
        async with self.db.connection() as conn:
            try:
                return (await snapshot_rows.get(conn, snapshot_id))["committed_at"]
            except NotFound:
                return None

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
            if marked is not None and (marked["committed_at"] is None
                                       or latest["committed_at"] > marked["committed_at"]):
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
        matches it); a small O_APPEND write, so the workers of a host can share the file.
        The file starts with ``session ID``, so notes left without a copy (a fenced step
        that wrote one after the copy was removed) can be found and removed."""
        self.marks.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self._mark_path(session_id),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size == 0:  # two writers may both add it: the first line counts
                os.write(fd, f"session {session_id}\n".encode())
            os.write(fd, f"{kind} {snapshot_id}\n".encode())
        finally:
            os.close(fd)

    def noted(self) -> list[str]:
        """The sessions this host keeps notes of (whether or not their copy is here)."""
        found = []
        try:
            entries = list(self.marks.iterdir())
        except FileNotFoundError:
            return []
        for path in entries:
            with contextlib.suppress(OSError), open(path, "rb") as fh:
                first = fh.readline(200).decode(errors="replace")
                if first.startswith("session ") and first.endswith("\n"):
                    found.append(first[8:-1])
        return sorted(found)

    def _mark(self, session_id: str, snapshot_id: Any) -> None:
        self._note(session_id, "seen", snapshot_id)

    def forget(self, session_id: str) -> None:
        """The session's copy here is gone (released): its notes and locks go too."""
        with contextlib.suppress(FileNotFoundError):
            self._mark_path(session_id).unlink()
        self.locks.forget(session_id)

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
        if policy == "never":
            return
        if not workspace.exists():
            if pre:  # the step starts from nothing: all it leaves is its own
                self._pre[row["id"]] = None
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
            if pre and taken is not None:
                self._pre[row["id"]] = taken
            elif taken is not None:
                await self._commit(row, taken)
        except (OneboxError, OSError) as exc:
            log.warning("snapshot of step %s failed: %s", row["step_id"], exc)
            bound = exc.__cause__ if isinstance(exc.__cause__, hostfs.BoundExceeded) else None
            await self._event(row, "snapshot_failed", {
                "when": "before" if pre else "after", "error": str(exc),
                **({"bound": bound.bound, "limit": bound.limit} if bound else {})})

    async def _commit(self, row: store.Row, post_id: uuid.UUID) -> None:
        """Make the step's changes part of the session's head (see the module)."""
        pre_id = self._pre.pop(row["id"], UNKNOWN)
        session_id = row["session_id"]
        done = await commit_step(self.db, self.objects, session_id=session_id,
                                 execution_id=row["id"], pre_id=pre_id, post_id=post_id)
        if done.merged_id is not None:
            await self._event(row, "workspace_merged", {
                "snapshot_id": str(done.merged_id), "onto": str(done.head_id),
                "conflicts": list(done.conflicts[:50])})

    async def _event(self, row: store.Row, kind: str, payload: dict[str, Any]) -> None:
        async with self.db.transaction() as conn:
            await store.append_event(conn, row["run_id"], kind, {"step_id": row["step_id"],
                                                                 **payload},
                                     trace_id=row["trace_id"], session_id=row["session_id"],
                                     execution_id=row["id"])
