"""A step's workspace around its execution: brought to the step's own view, snapshotted
after, and its change set committed with the attempt's archive.

A run's files are one history (:mod:`onebox.snapshots.history`): a step's *view* is the
run's base plus the change sets of the steps it depends on, in plan order, whichever host
ran them; its *change set* is exactly what it did to that view; the archive of the attempt
commits it (one transaction, after the fenced write: an attempt whose lease was taken over
commits nothing) and brings the run's head up to date.

**Before a step** (:meth:`StepWorkspace.using`), on the host that runs it: the session's
copy here is held alone (steps of one session run one at a time on a host; steps on other
hosts run meanwhile), scanned, and brought to the step's view when it differs: a copy is
never trusted because it exists (a killed worker's, a fenced attempt's, a sibling's writes).
That restore is a ``workspace_restored`` event (``reason: missing`` or ``stale``). The
view is recorded as the attempt's 'pre' snapshot, made from stored objects alone.

**After it**: its 'post' snapshot, and its change set (view to post), handed to the archive
(``Outcome.commit``). A snapshot that cannot be taken (a workspace past a bound: entries,
depth, time or apparent bytes) is a ``snapshot_failed`` event naming the bound; the step
keeps its result, and what it wrote is not part of the run's files (later steps do not see
it, on any host).

This holds with ``snapshot_policy: always`` (the default). With ``on_failure`` or ``never``
the steps of a run share the host's copy as it is, with no history: one host only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from onebox.config import Settings
from onebox.errors import Conflict, NotFound, OneboxError, StorageError, WorkspaceConflict
from onebox.objects.base import ObjectStore
from onebox.runtime.engine import run_files, run_outputs
from onebox.runtime.engine.copy_locks import CopyLocks
from onebox.sandbox import hostfs
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.sessions import serves
from onebox.sandbox.snapshot_manifest import Manifest
from onebox.sandbox.snapshot_restore import LOST_FOUND
from onebox.sandbox.snapshots import restore, scan
from onebox.snapshots import history
from onebox.snapshots.archive import record_snapshot, snapshot_before_step, snapshot_step
from onebox.snapshots.replay import restore_manifest_into_session
from onebox.store import runs as store
from onebox.store import snapshots as snapshot_rows
from onebox.store.db import Database

log = logging.getLogger(__name__)
MARKS_DIR = "workspace-marks"


def _clear(workspace: Path) -> None:
    """Remove everything in the workspace (never following a name out of it), keeping the
    directory itself, the mount on it and its lost+found."""
    with hostfs.root(workspace) as root_fd:
        for name in os.listdir(root_fd):
            if name != LOST_FOUND:
                hostfs.remove_tree(root_fd, name)


async def _holds(workspace: Path, view: Manifest) -> bool:
    """Whether the copy holds exactly ``view`` (a copy past a bound, or unreadable, does not)."""
    try:
        return (await asyncio.to_thread(scan, workspace)).sha256 == view.sha256
    except (OneboxError, OSError):
        return False


class StepWorkspace:
    """The view, snapshot and commit duties of one worker, over one object store."""

    def __init__(self, db: Database, backend: SandboxBackend, objects: ObjectStore,
                 settings: Settings) -> None:
        self.db, self.backend, self.objects, self.settings = db, backend, objects, settings
        self.marks = settings.sandbox_dir / MARKS_DIR
        self.locks = CopyLocks(self.marks / "locks")
        self.manifests = history.Manifests(objects)
        self._views: dict[uuid.UUID, Manifest] = {}  # execution -> the view it started on
        self._changes: dict[uuid.UUID, history.Changes] = {}  # execution -> its change set
        self._posts: dict[uuid.UUID, tuple[uuid.UUID, str]] = {}  # execution -> its 'post

    @property
    def tracked(self) -> bool:
        """Whether steps have views and change sets (``snapshot_policy: always``)."""
        return self.settings.snapshot_policy == "always"

    @contextlib.asynccontextmanager
    async def using(self, row: store.Row) -> AsyncIterator[None]:
        """Around a step's execution: the copy here, alone, brought to the step's view
        (WorkspaceConflict when the plan fails on overwrites and the view holds one); the
        caller takes the 'after' snapshot (:meth:`after`) inside."""
        if not self.tracked:
            async with self.locks.shared(row["session_id"]):
                await self._legacy_before(row)
                yield
            return
        try:
            async with self.locks.exclusive(row["session_id"]):
                view = await self._bring_to_view(row)
                if view is None:  # a run with steps outside the history: the copy as it is
                    view = await self._copy_as_view(row)
                await self._record_view(row, view)
                yield
        finally:
            self._views.pop(row["id"], None)

    async def prepare(self, row: store.Row) -> None:
        """A copy here for an agent's model call to list (its inputs, or the run's files so
        far when there is none here). A copy that exists is left as it is: the model call
        only reads it, and replacing it could pull files from under the run's other model
        calls measuring the sandbox; the code step it leads to starts on its own view."""
        if self.backend.workspace(row["session_id"]).exists():
            return
        if not self.tracked:
            await self._claim(row)
            await self._place_inputs(row)
            return
        async with self.locks.exclusive(row["session_id"]):
            if not self.backend.workspace(row["session_id"]).exists() \
                    and await self._bring_to_view(row) is None:
                await self._copy_as_view(row)

    async def _bring_to_view(self, row: store.Row) -> Manifest | None:
        """The copy here brought to the step's view; None (nothing done) when a step of the
        run ran outside the history (a worker without an object store, or code before
        change sets): only the copy it ran on knows its files."""
        await self._ensure_base(row)
        async with self.db.connection() as conn:
            if await snapshot_rows.untracked_steps(conn, row["run_id"]):
                return None
            plan = await history.plan_shape(conn, row.get("plan_id"))
            folded = await history.view(conn, self.manifests, row, plan)
        if folded.overwrites and plan.fail_on_conflict:
            pairs = "; ".join(f"steps {o.lost!r} and {o.kept!r} both changed {o.path!r}"
                              for o in folded.overwrites[:3])
            more = len(folded.overwrites) - 3
            raise WorkspaceConflict(
                f"{pairs}{f' (and {more} more paths)' if more > 0 else ''}, and neither step "
                "depends on the other; the plan says conflicts: fail. Make one step depend on "
                "the other, write different paths, or drop 'conflicts: fail' (the later step "
                "in the plan then wins)", field="conflicts")
        await self._sync(row, folded.manifest)
        return folded.manifest

    async def _copy_as_view(self, row: store.Row) -> Manifest:
        """The copy here as the step's view (restored from the session's head when there is
        none here), for a run with steps outside the history."""
        workspace = self.backend.workspace(row["session_id"])
        if not workspace.exists():
            async with self.db.connection() as conn:
                head = await snapshot_rows.latest_commit(conn, row["session_id"])
            if head is not None:
                await self._sync(row, await self.manifests.get(str(head["sha256"])))
        try:
            return await asyncio.to_thread(scan, workspace)
        except (OneboxError, OSError):
            return Manifest(())

    async def _ensure_base(self, row: store.Row) -> None:
        """A run with input files and no base yet: the first step to start makes it (the
        inputs in a new workspace, captured), committed once for every host."""
        async with self.db.connection() as conn:
            if await snapshot_rows.run_base(conn, row["session_id"], row["run_id"]) is not None:
                return
        if not await run_files.listed(self.db, row["run_id"], "input"):
            return
        await self._claim(row)
        if self.backend.workspace(row["session_id"]).exists():
            await self.backend.cleanup(row["session_id"])
        await self._place_inputs(row)
        record = await record_snapshot(self.db, self.objects,
                                       self.backend.workspace(row["session_id"]),
                                       session_id=row["session_id"], kind="manual", reuse=False)
        async with self.db.transaction() as conn:
            await snapshot_rows.lock_session_commits(conn, row["session_id"])
            if await snapshot_rows.run_base(conn, row["session_id"], row["run_id"]) is None:
                await snapshot_rows.commit(conn, record.id)

    async def _claim(self, row: store.Row) -> None:
        """The session's row, before its workspace is made here: a run that ends before its
        first code step (cancelled while its model is asked) still has it released."""
        async with self.db.connection() as conn:
            await store.execute(conn, "upsert_session", {  # as sessions.touch_session
                "id": row["session_id"], "run_id": row["run_id"], "backend": self.backend.name})

    async def _place_inputs(self, row: store.Row) -> None:
        placed = await run_files.place_inputs(self.db, self.objects, self.backend, row)
        if placed:
            await self._event(row, "inputs_placed", {"files": placed})

    async def _sync(self, row: store.Row, view: Manifest) -> None:
        """Make the copy here hold exactly ``view``: scanned, and when it differs (or is not
        here) replaced and scanned again. Replacing drops whatever the host kept of the
        session (a killed worker's disk image, which the sandbox would otherwise adopt)."""
        session_id = row["session_id"]
        workspace = self.backend.workspace(session_id)
        here = workspace.exists()
        # Only a copy this process serves is trusted when a scan says it holds the view: one
        # a previous process left may be a mount point whose disk image that process's mount
        # namespace took away (a worker in its own mount namespace: `ip netns exec`, a pod),
        # an empty directory the sandbox would then mount the old image on, files and all.
        if here and serves(self.backend, session_id) and await _holds(workspace, view):
            self._note(session_id, view.sha256)
            return
        for attempt in range(2):
            try:
                if attempt == 0 and here and serves(self.backend, session_id):
                    # in place: the live session, its mount and uid stay
                    async with self.backend.hold(session_id):  # no execution meanwhile
                        await asyncio.to_thread(_clear, workspace)
                        with contextlib.suppress(Conflict):  # written meanwhile: checked below
                            await restore(self.objects, view, workspace)
                else:  # whole: whatever the host kept of it goes (a killed worker's image)
                    await self.backend.cleanup(session_id)
                    await self._claim(row)
                    await restore_manifest_into_session(self.objects, self.backend, view,
                                                        session_id=session_id)
            except (NotFound, FileNotFoundError) as exc:
                raise StorageError(
                    f"the run's files cannot be restored on this host: {exc} (needed by its "
                    f"view {view.sha256[:12]}); every host must share one object store, and "
                    "`onebox doctor` lists every object the database expects that the store "
                    "lacks") from exc
            if await _holds(workspace, view):
                break
            log.warning("the workspace of %s did not hold step %s's view once restored; "
                        "replacing it again", session_id, row["step_id"])
        else:
            raise StorageError(f"the workspace of {session_id} on this host could not be "
                               f"brought to step {row['step_id']!r}'s view; the step is "
                               "retried (on this host or another)")
        self._note(session_id, view.sha256)
        if here or view.entries:
            await self._event(row, "workspace_restored", {
                "sha256": view.sha256, "files": len(view.files()),
                "reason": "stale" if here else "missing"})
            log.info("brought the workspace of %s to step %s's view (%s)", session_id,
                     row["step_id"], "the copy here was stale" if here else "no copy here")

    async def _record_view(self, row: store.Row, view: Manifest) -> None:
        try:
            async with self.db.transaction() as conn:
                await history.record_view(conn, self.manifests, view,
                                          session_id=row["session_id"], execution_id=row["id"])
        except (OneboxError, OSError) as exc:
            log.warning("the view of step %s could not be recorded: %s", row["step_id"], exc)
            await self._event(row, "snapshot_failed", {"when": "before", "error": str(exc)})
        self._views[row["id"]] = view

    async def after(self, row: store.Row, *, failed: bool) -> None:
        """The attempt's 'post' snapshot and its change set (see the module)."""
        if not self.tracked:
            await self._legacy_after(row, failed=failed)
            return
        view = self._views.get(row["id"])
        workspace = self.backend.workspace(row["session_id"])
        if view is None:
            return
        try:
            if not workspace.exists():
                post = Manifest(())
            else:
                record = await record_snapshot(self.db, self.objects, workspace,
                                               session_id=row["session_id"],
                                               execution_id=row["id"], kind="post")
                post = await self.manifests.get(record.sha256)
                self._posts[row["id"]] = (record.id, post.sha256)
        except (OneboxError, OSError) as exc:
            await self._failed_snapshot(row, "after", exc)
            self._changes[row["id"]] = {}  # what it wrote is not part of the run's files
            return
        self._changes[row["id"]] = await asyncio.to_thread(history.change_set, view, post)
        self._note(row["session_id"], post.sha256)

    def commit_for(self, row: store.Row) -> Any:
        """What the archive of ``row`` commits (``Outcome.commit``), None if nothing."""
        changes = self._changes.pop(row["id"], None)
        post = self._posts.pop(row["id"], None)
        if changes is None:
            return None
        position = int(row.get("step_number") or 0)

        async def commit(conn: store.Conn, archived: store.Row) -> None:
            await history.commit(conn, self.manifests, archived, position, changes, post)

        return commit

    async def _failed_snapshot(self, row: store.Row, when: str, exc: BaseException) -> None:
        log.warning("snapshot of step %s failed: %s", row["step_id"], exc)
        bound = exc.__cause__ if isinstance(exc.__cause__, hostfs.BoundExceeded) else None
        await self._event(row, "snapshot_failed", {
            "when": when, "error": str(exc),
            **({"bound": bound.bound, "limit": bound.limit} if bound else {})})

    # -- without history (snapshot_policy on_failure / never) --------------------

    async def _legacy_before(self, row: store.Row) -> None:
        if self.settings.snapshot_policy == "never":
            return
        workspace = self.backend.workspace(row["session_id"])
        if workspace.exists():
            with contextlib.suppress(OneboxError, OSError):
                await snapshot_before_step(self.db, self.objects, workspace,
                                           session_id=row["session_id"], execution_id=row["id"],
                                           policy=self.settings.snapshot_policy)

    async def _legacy_after(self, row: store.Row, *, failed: bool) -> None:
        workspace = self.backend.workspace(row["session_id"])
        if self.settings.snapshot_policy == "never" or not workspace.exists():
            return
        try:
            await snapshot_step(self.db, self.objects, workspace, session_id=row["session_id"],
                                execution_id=row["id"], policy=self.settings.snapshot_policy,
                                failed=failed)
        except (OneboxError, OSError) as exc:
            await self._failed_snapshot(row, "after", exc)

    # -- the notes of this host: which sessions have (or had) a copy here ----------

    def _mark_path(self, session_id: str) -> Path:
        return self.marks / hashlib.sha256(session_id.encode()).hexdigest()[:32]

    def _note(self, session_id: str, sha256: str) -> None:
        """Append what the copy here holds now; the file starts with ``session ID``, so a
        copy left without its notes (or notes without a copy) can be found and removed."""
        self.marks.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self._mark_path(session_id),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size == 0:  # two writers may both add it: the first line counts
                os.write(fd, f"session {session_id}\n".encode())
            os.write(fd, f"held {sha256}\n".encode())
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

    def forget(self, session_id: str) -> None:
        """The session's copy here is gone (released): its notes and locks go too."""
        with contextlib.suppress(FileNotFoundError):
            self._mark_path(session_id).unlink()
        self.locks.forget(session_id)

    async def keep_outputs(self, session: store.Row) -> None:
        """Keep the finished run's outputs before its workspace goes: the entries of the
        run's head (whichever host ran which step), stored as snapshots store them; a
        failure is an ``outputs_failed`` event, never a stuck release."""
        try:
            await run_outputs.keep_outputs(self.db, self.objects, self.backend, session,
                                           self.settings.runtime, await self._head(session))
        except (OneboxError, OSError) as exc:
            log.warning("keeping the outputs of run %s failed: %s", session["run_id"], exc)
            async with self.db.transaction() as conn:
                await store.append_event(conn, session["run_id"], "outputs_failed",
                                         {"error": str(exc)}, trace_id=session["trace_id"],
                                         session_id=session["id"])

    async def _head(self, session: store.Row) -> Manifest | None:
        """The run's files as one history, when it has them (else its outputs are read from
        the copy here)."""
        if not self.tracked:
            return None
        async with self.db.connection() as conn:
            if await snapshot_rows.untracked_steps(conn, session["run_id"]):
                return None  # steps outside the history: the copy here is the record
            head = await snapshot_rows.latest_commit(conn, session["id"])
        return None if head is None else await self.manifests.get(str(head["sha256"]))

    async def _event(self, row: store.Row, kind: str, payload: dict[str, Any]) -> None:
        async with self.db.transaction() as conn:
            await store.append_event(conn, row["run_id"], kind, {"step_id": row["step_id"],
                                                                 **payload},
                                     trace_id=row["trace_id"], session_id=row["session_id"],
                                     execution_id=row["id"])
