"""Replay a recorded step: same code, language, limits and inputs, in a fresh session.

    report = await replay(db, backend, store, execution_id, hash_output=output_hash)
    report.match          # exit code, stdout, stderr, files and output hash all equal
    report.stdout_diff    # a unified diff when they are not

The inputs are the step's pre-execution snapshot (``task_execution.pre_snapshot_id``).
Without one, the session's newest snapshot taken before the step is used and the
report says ``pre_source="derived"``; without any, the step replays in an empty
workspace (``"empty"``). Files are compared with the step's post-execution snapshot
when there is one, else with the ``files_written`` the step recorded.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from onebox import textdiff
from onebox.errors import SandboxError, ValidationError
from onebox.objects.base import ObjectStore
from onebox.sandbox.base import (
    ExecRequest,
    ExecResult,
    FileChange,
    Limits,
    NetworkPolicy,
    SandboxBackend,
)
from onebox.sandbox.snapshot_manifest import Manifest, TreeDiff, diff
from onebox.sandbox.snapshots import RestoreReport, load_manifest, restore, scan
from onebox.store import snapshots as rows
from onebox.store.db import Database

STDIO_TAIL_CHARS = 64_000  # the runtime keeps only this much of long outputs
DIFF_CHARS = 100_000  # of an output's diff (onebox.textdiff bounds its cost before)
PreSource = Literal["recorded", "derived", "empty"]


@dataclass(frozen=True)
class SessionRestore:
    session_id: str
    workspace: Path
    report: RestoreReport | None


@dataclass(frozen=True)
class ReplayReport:
    execution_id: uuid.UUID
    session_id: str
    pre_snapshot_id: uuid.UUID | None
    pre_source: PreSource
    match: bool
    recorded_exit_code: int | None
    replayed_exit_code: int | None
    recorded_output_hash: str | None
    replayed_output_hash: str | None
    stdout_diff: str
    stderr_diff: str
    files: TreeDiff
    files_compared_with: Literal["snapshot", "files_written"]
    result: ExecResult = field(repr=False)
    concurrent_steps: tuple[str, ...] = ()
    excluded_paths: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "execution_id": str(self.execution_id), "session_id": self.session_id,
            "pre_snapshot_id": str(self.pre_snapshot_id) if self.pre_snapshot_id else None,
            "pre_source": self.pre_source, "match": self.match,
            "exit_code": {"recorded": self.recorded_exit_code,
                          "replayed": self.replayed_exit_code},
            "output_hash": {"recorded": self.recorded_output_hash,
                            "replayed": self.replayed_output_hash},
            "stdout_diff": self.stdout_diff, "stderr_diff": self.stderr_diff,
            "files": self.files.to_json(), "files_compared_with": self.files_compared_with,
            "concurrent_steps": list(self.concurrent_steps),
            "excluded_paths": list(self.excluded_paths),
        }


def new_session_id(prefix: str = "restore") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def restore_into_session(
    db: Database,
    store: ObjectStore,
    backend: SandboxBackend,
    snapshot_ref: str | uuid.UUID | None,
    *,
    session_id: str | None = None,
) -> SessionRestore:
    """Open a new sandbox session whose workspace holds the snapshot (None: empty)."""
    session_id = session_id or new_session_id()
    await _open_session(backend, session_id)
    workspace = backend.workspace(session_id)
    if snapshot_ref is None:
        return SessionRestore(session_id, workspace, None)
    async with db.connection() as conn:
        row = await rows.get(conn, snapshot_ref)
    async with backend.hold(session_id):  # no execution runs in the session meanwhile
        report = await restore(store, str(row["sha256"]).strip(), workspace)
    return SessionRestore(session_id, workspace, report)


async def restore_manifest_into_session(store: ObjectStore, backend: SandboxBackend,
                                        manifest: Manifest, *, session_id: str) -> RestoreReport:
    """Open the session (its workspace absent or empty) and restore ``manifest`` into it."""
    await _open_session(backend, session_id)
    async with backend.hold(session_id):  # no execution runs in the session meanwhile
        return await restore(store, manifest, backend.workspace(session_id))


async def _open_session(backend: SandboxBackend, session_id: str) -> None:
    """Let the backend create the workspace its own way (owner, disk quota), empty."""
    result = await backend.execute(ExecRequest(session_id=session_id, code=":", language="bash"))
    if not result.ok:
        raise SandboxError(
            f"could not open sandbox session {session_id}: {result.error or result.stderr}"
        )


async def replay(
    db: Database,
    backend: SandboxBackend,
    store: ObjectStore,
    execution_id: uuid.UUID,
    *,
    hash_output: Callable[[ExecResult], str] | None = None,
    keep_session: bool = False,
) -> ReplayReport:
    """Re-run a recorded step from its inputs in a fresh session and compare what it produced."""
    async with db.connection() as conn:
        execution = await rows.get_execution(conn, execution_id)
        pre_id, pre_source = await _resolve_inputs(conn, execution)
        post = await rows.get(conn, execution["snapshot_id"]) if execution["snapshot_id"] else None
        concurrent = _concurrent(await rows.concurrent_writes(conn, execution_id))
        pre_sha = str((await rows.get(conn, pre_id))["sha256"]).strip() if pre_id else None
    request_fields = _request_fields(execution)
    opened = await restore_into_session(db, store, backend, pre_id,
                                        session_id=new_session_id("replay"))
    try:
        result = await backend.execute(ExecRequest(session_id=opened.session_id, **request_fields))
        after = await asyncio.to_thread(scan, opened.workspace)
        files, compared_with = await _compare_files(store, post, execution, after, result)
        own = await _own_writes(store, pre_sha, after, result)
    finally:
        if not keep_session:
            await backend.cleanup(opened.session_id)
    excluded = _excluded(concurrent, own)
    return _report(execution, opened.session_id, pre_id, pre_source, result,
                   _without(files, excluded), compared_with, hash_output,
                   Concurrent(concurrent.steps, excluded))


async def _own_writes(
    store: ObjectStore, pre_sha: str | None, after: Manifest, result: ExecResult
) -> set[str]:
    """Every path the replayed step created, changed or deleted: it ran alone."""
    before = await load_manifest(store, pre_sha) if pre_sha else Manifest(())
    changes = diff(before, after)
    return ({f.path for f in result.files_written}
            | set(changes.added) | set(changes.removed) | set(changes.changed))


@dataclass(frozen=True)
class Concurrent:
    """Steps that ran in the same session at the same time, and the files they wrote.

    Their writes land in the shared workspace while this step runs, so they appear in
    its post-execution snapshot and recorded files_written; replay leaves them out."""

    steps: tuple[str, ...] = ()
    paths: frozenset[str] = frozenset()


def _concurrent(found: list[rows.Row]) -> Concurrent:
    paths = {f["path"] for row in found for f in row["files_written"] or ()}
    return Concurrent(tuple(str(row["step_id"]) for row in found), frozenset(paths))


def _excluded(concurrent: Concurrent, own: set[str]) -> frozenset[str]:
    """What concurrent steps wrote and the replayed step did not (with their directories)."""
    others = concurrent.paths - own
    dirs = {str(p) for path in others for p in PurePosixPath(path).parents} - {"."}
    own_dirs = {str(p) for path in own for p in PurePosixPath(path).parents}
    return frozenset(others | (dirs - own_dirs - own))


def _without(files: TreeDiff, paths: frozenset[str]) -> TreeDiff:
    return TreeDiff(*(tuple(p for p in group if p not in paths)
                      for group in (files.added, files.removed, files.changed)))


async def _resolve_inputs(
    conn: rows.Conn, execution: rows.Row
) -> tuple[uuid.UUID | None, PreSource]:
    if execution["pre_snapshot_id"] is not None:
        return execution["pre_snapshot_id"], "recorded"
    if execution["session_id"]:
        earlier = await rows.latest_before(conn, execution["session_id"], execution["started_at"])
        if earlier is not None:
            return earlier["id"], "derived"
    return None, "empty"


def _request_fields(execution: rows.Row) -> dict[str, Any]:
    details = execution["details"] or {}
    code, language = details.get("code"), details.get("language")
    if language is not None and language not in ("python", "bash", "node"):
        raise ValidationError(
            f"step execution {execution['id']} used the tool {language!r}, which runs no "
            "code in the sandbox; only python, bash and node steps can be replayed",
            field="details.language",
        )
    if not isinstance(code, str) or language is None:
        raise ValidationError(
            f"step execution {execution['id']} did not record its code and language "
            "(task_execution.details.code/.language), so it cannot be replayed",
            field="details.code",
        )
    known = {f.name for f in fields(Limits)}
    limits = Limits(**{k: v for k, v in (details.get("limits") or {}).items() if k in known})
    network = NetworkPolicy(allow_domains=tuple(details.get("allow_domains") or ()))
    return {"code": code, "language": language, "limits": limits, "network": network}


async def _compare_files(
    store: ObjectStore, post: rows.Row | None, execution: rows.Row, after: Manifest,
    result: ExecResult,
) -> tuple[TreeDiff, Literal["snapshot", "files_written"]]:
    """Replayed workspace vs the recorded post-execution snapshot, else vs files_written."""
    if post is not None:
        expected = await load_manifest(store, str(post["sha256"]).strip())
        return diff(expected, after), "snapshot"
    recorded = {f["path"]: (f["change"], f.get("sha256"))
                for f in (execution["details"] or {}).get("files_written") or ()}
    replayed = {f.path: (f.change, f.sha256) for f in result.files_written}
    return TreeDiff(
        added=tuple(sorted(replayed.keys() - recorded.keys())),
        removed=tuple(sorted(recorded.keys() - replayed.keys())),
        changed=tuple(sorted(p for p in recorded.keys() & replayed.keys()
                             if recorded[p] != replayed[p])),
    ), "files_written"


def _report(
    execution: rows.Row, session_id: str, pre_id: uuid.UUID | None, pre_source: PreSource,
    result: ExecResult, files: TreeDiff, compared_with: Literal["snapshot", "files_written"],
    hash_output: Callable[[ExecResult], str] | None, concurrent: Concurrent,
) -> ReplayReport:
    stdout_diff = _text_diff(execution["stdout"], result.stdout, "stdout")
    stderr_diff = _text_diff(execution["stderr"], result.stderr, "stderr")
    replayed_hash = hash_output(result) if hash_output is not None else None
    match = (execution["exit_code"] == result.exit_code and not stdout_diff and not stderr_diff
             and files.empty and _hashes_agree(execution, result, hash_output, concurrent.paths))
    return ReplayReport(
        execution_id=execution["id"], session_id=session_id, pre_snapshot_id=pre_id,
        pre_source=pre_source, match=match, recorded_exit_code=execution["exit_code"],
        replayed_exit_code=result.exit_code, recorded_output_hash=execution["output_hash"],
        replayed_output_hash=replayed_hash, stdout_diff=stdout_diff, stderr_diff=stderr_diff,
        files=files, files_compared_with=compared_with, result=result,
        concurrent_steps=concurrent.steps, excluded_paths=tuple(sorted(concurrent.paths)),
    )


def _hashes_agree(
    execution: rows.Row, result: ExecResult, hash_output: Callable[[ExecResult], str] | None,
    excluded: frozenset[str],
) -> bool:
    """Equal output hashes; with concurrent steps, equal over this step's own files.

    The recorded side is rebuilt from the row (exit code, stdout, stderr, files_written);
    when that does not reproduce the recorded hash (a truncated stdout), only the raw
    hashes count."""
    recorded = execution["output_hash"]
    if hash_output is None or recorded is None or hash_output(result) == recorded:
        return True
    original = _recorded_result(execution)
    if not excluded or original is None or hash_output(original) != recorded:
        return False
    return hash_output(_drop(original, excluded)) == hash_output(_drop(result, excluded))


def _recorded_result(execution: rows.Row) -> ExecResult | None:
    try:
        written = tuple(FileChange(**f) for f in (execution["details"] or {})
                        .get("files_written") or ())
    except TypeError:
        return None
    return ExecResult(ok=execution["status"] == "SUCCESS", exit_code=execution["exit_code"],
                      stdout=execution["stdout"] or "", stderr=execution["stderr"] or "",
                      duration_ms=0.0, files_written=written)


def _drop(result: ExecResult, paths: frozenset[str]) -> ExecResult:
    return replace(result, files_written=tuple(f for f in result.files_written
                                               if f.path not in paths))


def _text_diff(recorded: str | None, replayed: str, name: str) -> str:
    """A unified diff, or "" when equal (a recorded tail matches the end of a longer output)."""
    recorded = recorded or ""
    if recorded == replayed or (len(recorded) >= STDIO_TAIL_CHARS and replayed.endswith(recorded)):
        return ""
    return textdiff.unified(recorded, replayed, f"recorded/{name}", f"replayed/{name}",
                            max_chars=DIFF_CHARS)[0]
