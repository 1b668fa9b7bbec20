"""Snapshot rows: which workspace snapshots exist, which step they belong to, which objects
they reference. The bytes themselves live in the object store.

Functions take an open connection so that callers decide the transaction; the
writes a step makes are single statements (one round trip each). :func:`register`
takes the GC lock shared while it records a new snapshot's objects; the garbage
collector takes it exclusively (:func:`lock_for_gc`), so it never deletes an object
a snapshot is about to rely on.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from onebox.errors import Conflict, NotFound, ValidationError
from onebox.store.db import Conn, Row
from onebox.store.queries import load_queries

Q = load_queries("snapshots")
Kind = Literal["pre", "post", "manual", "merge"]

GC_LOCK_KEY = 0x0B0B5A01  # pg advisory lock: shared by captures, exclusive for the GC


async def lock_for_gc(conn: Conn) -> None:
    """Hold the GC lock exclusively until the transaction ends."""
    await conn.execute(Q["lock_exclusive"], {"key": GC_LOCK_KEY})


async def register(
    conn: Conn,
    *,
    snapshot_id: uuid.UUID,
    session_id: str,
    execution_id: uuid.UUID | None,
    kind: Kind,
    sha256: str,
    manifest_key: str,
    total_bytes: int,
    file_count: int,
    object_keys: Sequence[str],
) -> None:
    """Record a PENDING snapshot and every object it references, under the GC lock (shared).

    Call it, committed, before uploading or relying on any of those objects."""
    try:
        await conn.execute(Q["register"], {
            "key": GC_LOCK_KEY, "id": snapshot_id, "session_id": session_id,
            "execution_id": execution_id, "kind": kind, "sha256": sha256,
            "manifest_key": manifest_key, "bytes": total_bytes, "file_count": file_count,
            "object_count": len(object_keys), "keys": list(object_keys),
        })
    except psycopg.errors.ForeignKeyViolation as exc:
        raise _no_execution(execution_id) from exc


async def stored_keys(conn: Conn, keys: Sequence[str]) -> set[str]:
    """The keys a READY snapshot references, hence stored. Call after :func:`register`
    committed (a new statement), so a GC that register waited for is already visible."""
    cur = await conn.execute(Q["stored_keys"], {"keys": list(keys)})
    return {str(r["key"]) for r in await cur.fetchall()}


async def finish(
    conn: Conn,
    snapshot_id: uuid.UUID,
    *,
    stored_bytes: int,
    duration_ms: float,
    execution_id: uuid.UUID | None,
    pre: bool,
    event: dict[str, Any],
) -> None:
    """Mark the snapshot READY, link the execution to it and append a ``snapshot_taken`` event."""
    cur = await conn.execute(Q["finish"], {
        "id": snapshot_id, "stored_bytes": stored_bytes, "duration_ms": duration_ms,
        "execution_id": execution_id, "pre": pre, "payload": _payload(event, execution_id, pre),
    })
    row = await cur.fetchone()
    assert row is not None
    if row["ready"] == 0:
        raise Conflict(f"snapshot {snapshot_id} was deleted while it was being written")
    if execution_id is not None and row["linked"] == 0:
        raise _no_execution(execution_id)


async def reuse(
    conn: Conn,
    *,
    session_id: str,
    sha256: str,
    execution_id: uuid.UUID | None,
    pre: bool,
    event: dict[str, Any],
) -> uuid.UUID | None:
    """Link the execution to a READY snapshot of this session with this hash, if there is one."""
    cur = await conn.execute(Q["reuse"], {
        "session_id": session_id, "sha256": sha256, "execution_id": execution_id, "pre": pre,
        "payload": _payload(event, execution_id, pre),
    })
    row = await cur.fetchone()
    if row is None or row["id"] is None:
        return None
    if execution_id is not None and row["linked"] == 0:
        raise _no_execution(execution_id)
    return uuid.UUID(str(row["id"]))


def _payload(event: dict[str, Any], execution_id: uuid.UUID | None, pre: bool) -> Jsonb:
    return Jsonb({**event, "execution_id": str(execution_id), "kind": "pre" if pre else "post"})


def _no_execution(execution_id: uuid.UUID | None) -> NotFound:
    return NotFound(f"step execution {execution_id} not found; insert it before snapshotting")


async def delete_unshared_pre(
    conn: Conn, snapshot_id: uuid.UUID, execution_id: uuid.UUID
) -> bool:
    """Drop the pre-execution snapshot this execution created, unless another step uses it."""
    cur = await conn.execute(
        Q["delete_unshared_pre"], {"snapshot_id": snapshot_id, "execution_id": execution_id}
    )
    return cur.rowcount > 0


async def delete(conn: Conn, snapshot_id: uuid.UUID) -> None:
    await conn.execute(Q["delete_snapshot"], {"id": snapshot_id})


async def get(conn: Conn, ref: str | uuid.UUID) -> Row:
    """One snapshot by id, or by a unique prefix of its id (as printed by ``snapshot list``)."""
    text = str(ref).strip().lower()
    try:
        cur = await conn.execute(Q["get"], {"id": uuid.UUID(text)})
        rows = [r for r in [await cur.fetchone()] if r is not None]
    except ValueError:
        if len(text) < 4 or any(c not in "0123456789abcdef-" for c in text):
            raise ValidationError(f"{ref!r} is not a snapshot id", field="snapshot_id") from None
        cur = await conn.execute(Q["by_prefix"], {"prefix": text})
        rows = list(await cur.fetchall())
    if not rows:
        raise NotFound(f"snapshot {ref} not found; list them with `onebox snapshot list`")
    if len(rows) > 1:
        raise ValidationError(f"snapshot id prefix {ref!r} is ambiguous; give more characters",
                              field="snapshot_id")
    return dict(rows[0])


async def list_snapshots(
    conn: Conn,
    *,
    session_id: str | None = None,
    execution_id: uuid.UUID | None = None,
    run_id: uuid.UUID | None = None,
    limit: int = 50,
) -> list[Row]:
    """Newest first; filtered by session, step execution and/or run."""
    cur = await conn.execute(Q["list"], {
        "session_id": session_id, "execution_id": execution_id, "run_id": run_id,
        "limit": limit,
    })
    return list(await cur.fetchall())


async def get_execution(conn: Conn, execution_id: uuid.UUID) -> Row:
    cur = await conn.execute(Q["execution"], {"id": execution_id})
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"step execution {execution_id} not found")
    return dict(row)


async def concurrent_writes(conn: Conn, execution_id: uuid.UUID) -> list[Row]:
    """Attempts that ran in the same session at the same time, with their files_written."""
    cur = await conn.execute(Q["concurrent_writes"], {"id": execution_id})
    return list(await cur.fetchall())


async def latest_before(conn: Conn, session_id: str, before: datetime) -> Row | None:
    """The session's newest READY snapshot taken before ``before``."""
    cur = await conn.execute(Q["latest_before"], {"session_id": session_id, "before": before})
    row = await cur.fetchone()
    return None if row is None else dict(row)


async def latest_commit(conn: Conn, session_id: str) -> Row | None:
    """The session's head: what its steps committed so far (migration 0033)."""
    cur = await conn.execute(Q["latest_commit"], {"session_id": session_id})
    row = await cur.fetchone()
    return None if row is None else dict(row)


async def lock_session_commits(conn: Conn, session_id: str) -> None:
    """One step of the session commits onto its head at a time (until the transaction ends)."""
    await conn.execute(Q["lock_session_commits"], {"session_id": session_id})


async def commit(conn: Conn, snapshot_id: uuid.UUID) -> Row:
    """The snapshot becomes the session's head (a registered 'merge' one also READY)."""
    cur = await conn.execute(Q["commit"], {"id": snapshot_id})
    row = await cur.fetchone()
    assert row is not None, "the snapshot to commit exists"
    return dict(row)


async def object_keys(conn: Conn, snapshot_id: uuid.UUID) -> list[str]:
    """Every object the snapshot references (its blobs and manifest)."""
    cur = await conn.execute(Q["object_keys"], {"id": snapshot_id})
    return [str(r["key"]) for r in await cur.fetchall()]


async def copy_as_head(conn: Conn, session_id: str, snapshot_id: uuid.UUID) -> uuid.UUID:
    """A new head of ``session_id`` holding what ``snapshot_id`` holds: a committed
    'manual' row naming the same stored objects (nothing is copied). A fork's session
    starts from it."""
    base = await get(conn, snapshot_id)
    head = uuid.uuid4()
    await register(
        conn, snapshot_id=head, session_id=session_id, execution_id=None, kind="manual",
        sha256=str(base["sha256"]).strip(), manifest_key=base["manifest_key"],
        total_bytes=base["bytes"], file_count=base["file_count"],
        object_keys=await object_keys(conn, snapshot_id))
    await commit(conn, head)
    return head


async def record_changes(conn: Conn, row: Row, position: int, changes: dict[str, Any]) -> None:
    """The archived attempt ``row``'s change set (migration 0036)."""
    await conn.execute(Q["record_changes"], {
        "execution_id": row["id"], "run_id": row["run_id"], "session_id": row["session_id"],
        "step_id": row["step_id"], "position": position, "changes": Jsonb(changes),
        "paths": len(changes)})


async def run_changes(conn: Conn, run_id: uuid.UUID) -> list[Row]:
    """Every archived attempt of the run with a change set (without the set), in plan
    order then attempt order."""
    cur = await conn.execute(Q["run_changes"], {"run_id": run_id})
    return [dict(r) for r in await cur.fetchall()]


async def changes_of(conn: Conn, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """The change sets of these attempts, by execution id."""
    cur = await conn.execute(Q["changes_of"], {"ids": list(ids)})
    return {r["execution_id"]: r["changes"] for r in await cur.fetchall()}


async def step_changes(conn: Conn, run_id: uuid.UUID, step_id: str) -> list[dict[str, Any]]:
    """Every archived attempt's change set of one step, oldest first."""
    cur = await conn.execute(Q["step_changes"], {"run_id": run_id, "step_id": step_id})
    return [dict(r["changes"]) for r in await cur.fetchall()]


async def untracked_steps(conn: Conn, run_id: uuid.UUID) -> set[str]:
    """Code steps of the run that ran and have no change set (see the query)."""
    cur = await conn.execute(Q["untracked_steps"], {"run_id": run_id})
    return {str(r["step_id"]) for r in await cur.fetchall()}


async def run_base(conn: Conn, session_id: str, run_id: uuid.UUID) -> Row | None:
    """What the run's steps start from (see the query)."""
    cur = await conn.execute(Q["run_base"], {"session_id": session_id, "run_id": run_id})
    row = await cur.fetchone()
    return None if row is None else dict(row)


async def expected_keys(conn: Conn) -> set[str]:
    """Every object the database says is stored (READY snapshots, run files, uploads)."""
    cur = await conn.execute(Q["expected_keys"], {})
    return {str(r["key"]) for r in await cur.fetchall()}


async def referenced_keys(conn: Conn) -> set[str]:
    cur = await conn.execute(Q["referenced_keys"], {})
    return {str(r["key"]) for r in await cur.fetchall()}


async def expire(
    conn: Conn,
    *,
    keep_last: int = 0,
    ttl_s: float | None = None,
    pending_grace_s: float = 3600.0,
) -> list[uuid.UUID]:
    """Delete snapshots past retention (and abandoned PENDING ones); return their ids."""
    cur = await conn.execute(Q["expire"], {
        "keep_last": keep_last, "ttl_s": ttl_s, "pending_grace_s": pending_grace_s,
    })
    return [uuid.UUID(str(r["id"])) for r in await cur.fetchall()]
