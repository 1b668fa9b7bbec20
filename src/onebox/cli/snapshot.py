"""`onebox snapshot list|show|restore|gc` and `onebox replay EXECUTION_ID`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from onebox.cli.common import fail, json_option, out, print_json, run, settings
from onebox.config import Settings
from onebox.objects import ObjectStore, get_object_store
from onebox.runtime.services.runs import resolve_id
from onebox.sandbox.snapshot_manifest import diff
from onebox.sandbox.snapshots import RestoreReport, load_manifest
from onebox.snapshots import archive
from onebox.snapshots.replay import ReplayReport
from onebox.store.db import Database
from onebox.store.ids import IdKind

ROW_FIELDS = ("id", "session_id", "execution_id", "kind", "status", "sha256", "bytes",
              "stored_bytes", "file_count", "object_count", "duration_ms", "created_at")


@asynccontextmanager
async def opened(cfg: Settings) -> AsyncIterator[tuple[Database, ObjectStore]]:
    store = get_object_store(cfg)
    db = await Database.open(cfg)
    try:
        yield db, store
    finally:
        await db.close()
        await store.close()


def public(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row.get(name) for name in ROW_FIELDS}


async def _resolve(db: Database, value: str | None, kind: IdKind) -> uuid.UUID | None:
    """A whole id or a unique prefix of one (see runtime.runs.resolve_id); None stays None."""
    return None if value is None else await resolve_id(db, value, kind=kind)


@click.group("snapshot")
def snapshot() -> None:
    """Workspace snapshots taken around each step."""


@snapshot.command("list")
@click.option("--session", "session_id", help="only this sandbox session")
@click.option("--execution", "execution_id", help="only the snapshots of this step execution")
@click.option("--run", "run_id", help="only the snapshots of this run's steps")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@json_option
def list_cmd(session_id: str | None, execution_id: str | None, run_id: str | None, limit: int,
             as_json: bool) -> None:
    """List snapshots, newest first."""
    async def go() -> list[dict[str, Any]]:
        async with opened(settings()) as (db, _store):
            exec_id = await _resolve(db, execution_id, "execution")
            rid = await _resolve(db, run_id, "run")
            found = await archive.list_snapshots(db, session_id=session_id, limit=limit,
                                                 execution_id=exec_id, run_id=rid)
            return [public(r) for r in found]

    found = run(go())
    if as_json:
        print_json({"snapshots": found})
        return
    table = Table(expand=False)
    for col in ("id", "session", "kind", "status", "files", "bytes", "stored", "created"):
        table.add_column(col, overflow="fold")
    for r in found:
        table.add_row(str(r["id"]), r["session_id"], r["kind"], r["status"], str(r["file_count"]),
                      _size(r["bytes"]), _size(r["stored_bytes"]),
                      r["created_at"].strftime("%Y-%m-%d %H:%M:%S"))
    out.print(table)


@snapshot.command("show")
@click.argument("snapshot_id")
@json_option
def show_cmd(snapshot_id: str, as_json: bool) -> None:
    """A snapshot's metadata and its files (SNAPSHOT_ID may be a unique prefix)."""
    async def go() -> dict[str, Any]:
        async with opened(settings()) as (db, store):
            row = await archive.find_snapshot(db, snapshot_id)
            manifest = await load_manifest(store, str(row["sha256"]).strip())
            return {**public(row), "manifest_key": row["manifest_key"],
                    "entries": [e.to_json() for e in manifest.entries]}

    data = run(go())
    if as_json:
        print_json(data)
        return
    out.print(f"[bold]snapshot {data['id']}[/]  {data['kind']}  {data['status']}  "
              f"session {data['session_id']}  execution {data['execution_id'] or '-'}")
    out.print(f"sha256 {data['sha256']}  {data['file_count']} files, {_size(data['bytes'])}")
    for entry in data["entries"]:
        detail = entry.get("target") or _size(entry.get("size", 0))
        out.print(f"  {entry['type']:<7} {entry['mode']:04o}  {entry['path']}  {detail}",
                  markup=False)


@snapshot.command("diff")
@click.argument("before_id")
@click.argument("after_id")
@json_option
def diff_cmd(before_id: str, after_id: str, as_json: bool) -> None:
    """Paths added, removed or changed from one snapshot to another (e.g. a step's pre and
    post snapshots: what the step did to its workspace)."""
    async def go() -> dict[str, list[str]]:
        async with opened(settings()) as (db, store):
            before = await archive.find_snapshot(db, before_id)
            after = await archive.find_snapshot(db, after_id)
            old = await load_manifest(store, str(before["sha256"]).strip())
            new = await load_manifest(store, str(after["sha256"]).strip())
            return diff(old, new).to_json()

    data = run(go())
    if as_json:
        print_json(data)
        return
    for label, mark in (("added", "+"), ("removed", "-"), ("changed", "~")):
        for path in data[label]:
            out.print(f"{mark} {path}", markup=False)
    if not any(data.values()):
        out.print("identical")


@snapshot.command("restore")
@click.argument("snapshot_id")
@click.option("--into", "into", type=click.Path(path_type=Path),
              help="an empty or new directory")
@click.option("--session", "new_session", is_flag=True,
              help="open a new sandbox session (tenant default) with the snapshot as its "
                   "workspace, and print its id for `onebox exec --session ID`")
@json_option
def restore_cmd(snapshot_id: str, into: Path | None, new_session: bool,
                as_json: bool) -> None:
    """Recreate a snapshot in a directory (--into) or a new sandbox session (--session),
    verifying every object's sha256."""
    if (into is None) != new_session:
        fail("give exactly one of --into DIR or --session", code=2)
    cfg = settings()

    async def go() -> dict[str, Any]:
        async with opened(cfg) as (db, store):
            if into is not None:
                report = await archive.restore_snapshot(db, store, snapshot_id, into)
                return _restored(report, None)
            return await _restore_session(cfg, db, store, snapshot_id)

    data = run(go())
    if as_json:
        print_json(data)
        return
    where = f"session {data['session_id']} ({data['into']})" if data["session_id"] else data["into"]
    out.print(f"restored {data['file_count']} files ({_size(data['bytes'])}) into "
              f"{escape(str(where))}")
    for path in data["skipped_symlinks"]:
        out.print(f"[yellow]skipped symlink pointing outside the directory:[/] {escape(path)}")
    if data["session_id"]:
        out.print(f"run code in it: onebox exec --session {data['session_id']} -- CODE")


async def _restore_session(
    cfg: Settings, db: Database, store: ObjectStore, snapshot_id: str
) -> dict[str, Any]:
    """Through the sessions service: the session is one the API, `onebox exec` and the E2B
    endpoints know (a row of tenant default), not a bare sandbox directory."""
    from onebox.runtime.services import session_service
    from onebox.sandbox.registry import get_backend

    backend = get_backend(cfg)
    try:
        opened = await session_service.restore_to_session(db, store, backend, snapshot_id,
                                                          "default")
    finally:
        await backend.close()
    return {"sha256": opened["sha256"], "into": opened["workspace"],
            "session_id": opened["session"]["id"], "file_count": opened["file_count"],
            "bytes": opened["bytes"], "skipped_symlinks": opened["skipped_symlinks"]}


def _restored(report: RestoreReport, session_id: str | None) -> dict[str, Any]:
    return {"sha256": report.sha256, "into": str(report.into.resolve()),
            "session_id": session_id, "file_count": report.file_count, "bytes": report.bytes,
            "skipped_symlinks": list(report.skipped_symlinks),
            "duration_ms": report.duration_ms}


@snapshot.command("gc")
@click.option("--keep-last", type=click.IntRange(0), default=None,
              help="keep this many per session (default: snapshot_keep_last; 0 keeps all)")
@click.option("--ttl-days", type=click.FloatRange(min=0, min_open=True), default=None,
              help="drop snapshots older than this (default: snapshot_ttl_days)")
@click.option("--dry-run", is_flag=True, help="only report what would be deleted")
@json_option
def gc_cmd(keep_last: int | None, ttl_days: float | None, dry_run: bool, as_json: bool) -> None:
    """Apply retention, then delete objects no snapshot references."""
    cfg = settings()
    keep = cfg.snapshot_keep_last if keep_last is None else keep_last
    ttl = ttl_days if ttl_days is not None else cfg.snapshot_ttl_days

    async def go() -> archive.GcReport:
        async with opened(cfg) as (db, store):
            return await archive.prune(db, store, keep_last=keep,
                                       ttl_s=ttl * 86400 if ttl else None, dry_run=dry_run)

    report = run(go())
    data = {"expired_snapshots": report.expired_snapshots, "objects_seen": report.objects_seen,
            "objects_kept": report.objects_kept, "objects_deleted": len(report.objects_deleted),
            "dry_run": report.dry_run}
    if as_json:
        print_json(data)
        return
    verb = "would delete" if dry_run else "deleted"
    out.print(f"expired {data['expired_snapshots']} snapshots; {verb} "
              f"{data['objects_deleted']} of {data['objects_seen']} objects")


@click.command("replay")
@click.argument("target")
@click.option("--keep-session", is_flag=True, help="keep the replay's sandbox session "
              "(one step only)")
@json_option
def replay_cmd(target: str, keep_session: bool, as_json: bool) -> None:
    """Re-run a recorded step, or every code step of a run, from its inputs and compare.

    TARGET is a run id (every code step is replayed from its own before-step snapshot, in
    plan order; no model is asked; the replay is recorded as a new run) or a step attempt's id (`onebox show RUN --json`:
    steps[].id), or a unique prefix of either.

    Exit code 0 when everything matches, 1 when something differs.
    """
    from onebox.runtime.engine.archive import output_hash
    from onebox.runtime.services import replays
    from onebox.sandbox.registry import get_backend
    from onebox.snapshots.replay import replay

    cfg = settings()

    async def go() -> ReplayReport | dict[str, Any]:
        backend = get_backend(cfg)
        try:
            async with opened(cfg) as (db, store):
                run_id = await _run_of(db, target)
                if run_id is not None:
                    return await replays.replay_here(
                        db, backend, store, cfg, run_id, "default",
                        on_step=None if as_json else _print_replayed_step)
                exec_id = await resolve_id(db, target, kind="execution")
                return await replay(db, backend, store, exec_id, hash_output=output_hash,
                                    keep_session=keep_session)
        finally:
            await backend.close()

    report = run(go())
    if isinstance(report, dict):
        if as_json:
            print_json(report)
        else:
            _print_run_replay(report)
        if report["first_difference"] is not None:
            raise SystemExit(1)
        return
    if as_json:
        print_json(report.to_json())
    else:
        _print_replay(report)
    if not report.match:
        raise SystemExit(1)


async def _run_of(db: Database, text: str) -> uuid.UUID | None:
    """The run TARGET names, or None when it names none (then it is a step attempt)."""
    from onebox.errors import NotFound

    try:
        run_id = await resolve_id(db, text, kind="run")
    except NotFound:
        return None
    found = await db.fetchone("SELECT 1 AS one FROM onebox.runs WHERE id = %(id)s",
                              {"id": run_id})
    return run_id if found else None


def _print_replayed_step(step: dict[str, Any]) -> None:
    """One step of a run's replay, printed as soon as it is done."""
    if not step["replayed"]:
        out.print(f"[dim]-       {escape(step['step_id'])}: {step['why']}[/]")
    elif step["match"]:
        out.print(f"[green]match[/]   {escape(step['step_id'])}")
    else:
        out.print(f"[red]differs[/] {escape(step['step_id'])}")


def _print_run_replay(report: dict[str, Any]) -> None:
    out.print(f"{report['matches']} of {report['replayed']} replayed steps match; "
              f"{report['model_calls']} model calls made; recorded as run "
              f"{report['replay_run_id']} (onebox diff {report['run_id']} "
              f"{report['replay_run_id']})")
    first = report["first_difference"]
    if first is not None:
        out.print(f"first difference: step {escape(first['step_id'])}")
        if first["stdout_diff"]:
            out.print(first["stdout_diff"], markup=False, highlight=False)
        files = first["files"]
        for kind in ("added", "removed", "changed"):
            if files.get(kind):
                out.print(f"files {kind}: {escape(', '.join(files[kind][:20]))}")


def _print_replay(report: ReplayReport) -> None:
    source = {"recorded": "its pre-execution snapshot", "empty": "an empty workspace",
              "derived": "the session's previous snapshot (no pre-execution snapshot recorded)"}
    out.print(f"replayed {report.execution_id} in session {report.session_id} "
              f"from {source[report.pre_source]}")
    if report.concurrent_steps:
        out.print(f"not compared: {', '.join(report.excluded_paths)} (written by "
                  f"{', '.join(report.concurrent_steps)}, running at the same time)",
                  markup=False)
    if report.match:
        out.print(f"[green]match[/]  output hash {report.replayed_output_hash or '-'}")
        return
    out.print("[red]mismatch[/]")
    if report.recorded_exit_code != report.replayed_exit_code:
        out.print(f"exit code: recorded {report.recorded_exit_code}, "
                  f"replayed {report.replayed_exit_code}")
    for text in (report.stdout_diff, report.stderr_diff):
        if text:
            out.print(text, markup=False, highlight=False, end="")
    for label, paths in (("added", report.files.added), ("removed", report.files.removed),
                         ("changed", report.files.changed)):
        for path in paths:
            out.print(f"file {label}: {path}", markup=False)
    recorded, replayed = report.recorded_output_hash, report.replayed_output_hash
    if recorded and replayed and recorded != replayed:
        out.print(f"output hash: recorded {recorded}, replayed {replayed}")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def register(main: click.Group) -> None:
    main.add_command(snapshot)
    main.add_command(replay_cmd)

