"""Snapshots recorded in PostgreSQL: the executor hooks and policies, links from
task_execution, reuse of identical snapshots, retention, and a garbage collector
that never deletes an object a snapshot references, even while snapshots are taken."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from onebox.errors import Conflict, NotFound, StorageError
from onebox.objects import FsObjectStore, ObjectStore, blob_key, manifest_key
from onebox.sandbox.snapshots import scan
from onebox.snapshots import archive
from onebox.store import snapshots as rows
from onebox.store.db import Database


async def insert_execution(
    db: Database, session_id: str, details: dict[str, Any] | None = None, **cols: Any
) -> uuid.UUID:
    """A run, its plan and one task_execution row, as the runtime would have written them."""
    run_id, plan_id, exec_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    trace = uuid.uuid4().hex
    values = {"status": "RUNNING", "exit_code": None, "stdout": None, "stderr": None,
              "output_hash": None, **cols}
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO onebox.runs (id, trace_id, source, request) VALUES (%s, %s, 'plan', %s)",
            (run_id, trace, Jsonb({})))
        await conn.execute(
            "INSERT INTO onebox.plans (id, run_id, version, spec, spec_hash) "
            "VALUES (%s, %s, 1, %s, %s)", (plan_id, run_id, Jsonb({}), "0" * 64))
        await conn.execute(
            "INSERT INTO onebox.task_execution (id, run_id, plan_id, session_id, trace_id, "
            "step_id, step_number, tool_name, input_hash, status, exit_code, stdout, stderr, "
            "output_hash, details) VALUES (%s, %s, %s, %s, %s, 's1', 1, 'python', %s, %s, %s, "
            "%s, %s, %s, %s)",
            (exec_id, run_id, plan_id, session_id, trace, "0" * 64, values["status"],
             values["exit_code"], values["stdout"], values["stderr"], values["output_hash"],
             Jsonb(details or {})))
    return exec_id


async def execution_links(db: Database, exec_id: uuid.UUID) -> tuple[Any, Any]:
    row = await db.fetchone(
        "SELECT pre_snapshot_id, snapshot_id FROM onebox.task_execution WHERE id = %s", (exec_id,))
    assert row is not None
    return row["pre_snapshot_id"], row["snapshot_id"]


@pytest.fixture
def store(tmp_path: Path) -> FsObjectStore:
    return FsObjectStore(tmp_path / "objects", fsync=False)


async def test_always_links_pre_and_post_snapshots(
    db: Database, store: FsObjectStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "input.txt").write_text("in")
    exec_id = await insert_execution(db, "sess-a")
    pre = await archive.snapshot_before_step(db, store, ws, session_id="sess-a",
                                             execution_id=exec_id, policy="always")
    (ws / "output.txt").write_text("out")
    post = await archive.snapshot_step(db, store, ws, session_id="sess-a", execution_id=exec_id,
                                       policy="always", failed=False)
    assert pre is not None and post is not None and pre != post
    assert await execution_links(db, exec_id) == (pre, post)
    rows = await db.fetch("SELECT * FROM onebox.snapshots ORDER BY created_at")
    assert [(r["kind"], r["status"], r["file_count"]) for r in rows] == [
        ("pre", "READY", 1), ("post", "READY", 2)]
    assert rows[1]["sha256"] == scan(ws).sha256 and rows[1]["execution_id"] == exec_id
    keys = await db.fetch("SELECT key FROM onebox.snapshot_objects WHERE snapshot_id = %s", (post,))
    assert sorted(k["key"] for k in keys) == sorted(scan(ws).object_keys())
    events = await db.fetch("SELECT type, payload FROM onebox.agent_events "
                            "WHERE type = 'snapshot_taken' ORDER BY seq")
    assert [(e["payload"]["kind"], e["payload"]["snapshot_id"]) for e in events] == [
        ("pre", str(pre)), ("post", str(post))]
    out = tmp_path / "restored"
    await archive.restore_snapshot(db, store, str(pre)[:8], out)
    assert [p.name for p in out.iterdir()] == ["input.txt"]


async def test_an_unchanged_workspace_reuses_the_snapshot_row(
    db: Database, store: FsObjectStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_text("x")
    first = await insert_execution(db, "sess-b")
    second = await insert_execution(db, "sess-b")
    pre1 = await archive.snapshot_before_step(db, store, ws, session_id="sess-b",
                                              execution_id=first, policy="always")
    post1 = await archive.snapshot_step(db, store, ws, session_id="sess-b", execution_id=first,
                                        policy="always", failed=False)
    pre2 = await archive.snapshot_before_step(db, store, ws, session_id="sess-b",
                                              execution_id=second, policy="always")
    assert pre1 == post1 == pre2
    other = await insert_execution(db, "sess-c")  # another session never shares rows
    pre3 = await archive.snapshot_before_step(db, store, ws, session_id="sess-c",
                                              execution_id=other, policy="always")
    assert pre3 != pre1
    assert (await db.fetchone("SELECT count(*) AS n FROM onebox.snapshots"))["n"] == 2  # type: ignore[index]


async def test_on_failure_keeps_only_failed_steps(
    db: Database, store: FsObjectStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ok, bad = await insert_execution(db, "s"), await insert_execution(db, "s")
    await archive.snapshot_before_step(db, store, ws, session_id="s", execution_id=ok,
                                       policy="on_failure")
    (ws / "a").write_text("1")
    assert await archive.snapshot_step(db, store, ws, session_id="s", execution_id=ok,
                                       policy="on_failure", failed=False) is None
    assert await execution_links(db, ok) == (None, None)
    pre = await archive.snapshot_before_step(db, store, ws, session_id="s", execution_id=bad,
                                             policy="on_failure")
    (ws / "a").write_text("2")
    post = await archive.snapshot_step(db, store, ws, session_id="s", execution_id=bad,
                                       policy="on_failure", failed=True)
    assert await execution_links(db, bad) == (pre, post)
    assert {r["kind"] for r in await db.fetch("SELECT kind FROM onebox.snapshots")} == {"pre", "post"}


async def test_never_records_nothing(db: Database, store: FsObjectStore, tmp_path: Path) -> None:
    exec_id = await insert_execution(db, "s")
    for failed in (True, False):
        assert await archive.snapshot_before_step(db, store, tmp_path, session_id="s",
                                                  execution_id=exec_id, policy="never") is None
        assert await archive.snapshot_step(db, store, tmp_path, session_id="s",
                                           execution_id=exec_id, policy="never",
                                           failed=failed) is None
    assert await db.fetch("SELECT id FROM onebox.snapshots") == []
    assert await store.list() == []


async def test_unknown_execution_is_not_found_and_leaves_no_row(
    db: Database, store: FsObjectStore, tmp_path: Path
) -> None:
    with pytest.raises(NotFound, match="execution"):
        await archive.snapshot_step(db, store, tmp_path, session_id="s",
                                    execution_id=uuid.uuid4(), policy="always", failed=True)
    assert await db.fetch("SELECT id FROM onebox.snapshots") == []


async def test_retention_then_gc_frees_only_unreferenced_objects(
    db: Database, store: FsObjectStore, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shared.txt").write_text("kept by every snapshot")
    ids = []
    for i in range(4):
        (ws / "changing.txt").write_text(f"version {i}")
        ids.append((await archive.record_snapshot(db, store, ws, session_id="s")).id)
    report = await archive.prune(db, store, keep_last=2)
    assert report.expired_snapshots == 2
    assert len(report.objects_deleted) == 4  # two old blobs, two old manifests
    left = {r["id"] for r in await db.fetch("SELECT id FROM onebox.snapshots")}
    assert left == set(ids[2:])
    for n, snapshot_id in enumerate(ids[2:]):
        out = tmp_path / f"out{n}"
        await archive.restore_snapshot(db, store, snapshot_id, out)
        assert (out / "changing.txt").read_text() == f"version {n + 2}"
    with pytest.raises(NotFound):
        await archive.restore_snapshot(db, store, ids[0], tmp_path / "gone")
    again = await archive.prune(db, store, keep_last=2)
    assert again.objects_deleted == () and again.expired_snapshots == 0


async def test_ttl_expires_old_snapshots(db: Database, store: FsObjectStore, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    old = await archive.record_snapshot(db, store, tmp_path, session_id="s1")
    new = await archive.record_snapshot(db, store, tmp_path, session_id="s2")
    await db.fetch("UPDATE onebox.snapshots SET created_at = now() - interval '3 days' "
                   "WHERE id = %s RETURNING id", (old.id,))
    assert await archive.expire_snapshots(db, ttl_s=86400) == [old.id]
    assert [r["id"] for r in await db.fetch("SELECT id FROM onebox.snapshots")] == [new.id]


class SlowStore(ObjectStore):
    """Delegates to a real store with small random delays, to widen race windows."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    async def _nap(self) -> None:
        await asyncio.sleep(random.uniform(0, 0.004))

    async def put(self, key: str, data: bytes) -> None:
        await self._nap()
        await self.inner.put(key, data)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def exists(self, key: str) -> bool:
        found = await self.inner.exists(key)
        await self._nap()
        return found

    async def delete(self, key: str) -> None:
        await self._nap()
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> list[str]:
        return await self.inner.list(prefix)


async def test_gc_running_concurrently_never_deletes_a_referenced_object(
    db: Database, tmp_path: Path
) -> None:
    store = SlowStore(FsObjectStore(tmp_path / "objects", fsync=False))
    pool = [os.urandom(2000) for _ in range(6)]  # few contents: heavy dedup across snapshots
    done = asyncio.Event()
    deleted: list[str] = []

    async def session(name: str) -> None:
        rng = random.Random(name)
        ws = tmp_path / name
        ws.mkdir()
        for round_no in range(8):
            for i in range(3):
                (ws / f"f{i}").write_bytes(rng.choice(pool))
            record = await archive.record_snapshot(db, store, ws, session_id=name)
            await archive.restore_snapshot(db, store, record.id, tmp_path / f"{name}-{round_no}")

    async def collector() -> None:
        while not done.is_set():
            report = await archive.prune(db, store, keep_last=1)
            deleted.extend(report.objects_deleted)
            await asyncio.sleep(0)

    gc_task = asyncio.create_task(collector())
    try:
        await asyncio.gather(*(session(f"s{i}") for i in range(3)))
    finally:
        done.set()
        await gc_task
    assert deleted, "the collector should have had unreferenced objects to delete"
    for row in await db.fetch("SELECT id FROM onebox.snapshots"):
        out = tmp_path / f"final-{row['id']}"
        await archive.restore_snapshot(db, store, row["id"], out)


class GatedStore(SlowStore):
    """Pauses the first delete until released, to stop a GC between deciding and deleting."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.paused = asyncio.Event()
        self.release = asyncio.Event()

    async def _nap(self) -> None:
        return None

    async def delete(self, key: str) -> None:
        self.paused.set()
        await self.release.wait()
        await self.inner.delete(key)


async def test_a_capture_reusing_a_blob_the_gc_is_deleting_still_gets_it_stored(
    db: Database, tmp_path: Path
) -> None:
    store = GatedStore(FsObjectStore(tmp_path / "objects", fsync=False))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.bin").write_bytes(b"content that outlives its first snapshot")
    old = await archive.record_snapshot(db, store, ws, session_id="old")
    await db.fetch("DELETE FROM onebox.snapshots WHERE id = %s RETURNING id", (old.id,))
    gc = asyncio.create_task(archive.collect_garbage(db, store))
    await store.paused.wait()  # the GC decided the blob is garbage and is about to delete it
    capture = asyncio.create_task(archive.record_snapshot(db, store, ws, session_id="new"))
    await asyncio.wait({capture}, timeout=0.5)  # without the GC lock it would finish here
    store.release.set()
    report = await gc
    record = await capture
    assert len(report.objects_deleted) == 2  # the blob and the old manifest
    await archive.restore_snapshot(db, store, record.id, tmp_path / "out")
    assert (tmp_path / "out/data.bin").read_bytes() == (ws / "data.bin").read_bytes()


class FailingStore(SlowStore):
    async def _nap(self) -> None:
        return None

    async def put(self, key: str, data: bytes) -> None:
        raise StorageError(f"disk full writing {key}")


async def test_a_failed_capture_leaves_no_row_and_pending_ones_expire(
    db: Database, tmp_path: Path
) -> None:
    (tmp_path / "f").write_text("x")
    exec_id = await insert_execution(db, "s")
    with pytest.raises(StorageError, match="disk full"):
        await archive.snapshot_step(db, FailingStore(FsObjectStore(tmp_path / "o")), tmp_path,
                                    session_id="s", execution_id=exec_id, policy="always",
                                    failed=True)
    assert await db.fetch("SELECT id FROM onebox.snapshots") == []
    assert await execution_links(db, exec_id) == (None, None)
    stuck = uuid.uuid4()
    async with db.connection() as conn:
        await rows.register(conn, snapshot_id=stuck, session_id="s", execution_id=None,
                            kind="manual", sha256="a" * 64, manifest_key="manifests/x.json",
                            total_bytes=0, file_count=0, object_keys=["manifests/x.json"])
    with pytest.raises(Conflict, match="being written"):
        await archive.restore_snapshot(db, FsObjectStore(tmp_path / "o"), stuck, tmp_path / "r")
    assert await archive.expire_snapshots(db) == []  # still within the grace period
    await db.fetch("UPDATE onebox.snapshots SET created_at = now() - interval '2 hours' "
                   "RETURNING id")
    assert await archive.expire_snapshots(db) == [stuck]


class CountingStore(SlowStore):
    """Records which keys captures asked the store about."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.asked: list[str] = []

    async def _nap(self) -> None:
        return None

    async def missing(self, keys: Iterable[str]) -> set[str]:
        wanted = list(keys)
        self.asked.extend(wanted)
        return await self.inner.missing(wanted)


async def test_objects_known_from_ready_snapshots_are_not_checked_again(
    db: Database, tmp_path: Path
) -> None:
    store = CountingStore(FsObjectStore(tmp_path / "objects", fsync=False))
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(10):
        (ws / f"f{i}").write_text(f"file {i}")
    await archive.record_snapshot(db, store, ws, session_id="a")
    assert len(store.asked) == 11  # ten blobs and the manifest
    store.asked.clear()
    (ws / "f0").write_text("changed")
    record = await archive.record_snapshot(db, store, ws, session_id="b")
    changed_blob = next(k for k in scan(ws).object_keys() if k.startswith("blobs/")
                        and k.endswith(hashlib.sha256(b"changed").hexdigest()))
    assert sorted(store.asked) == sorted([changed_blob, manifest_key(record.sha256)])
    await archive.restore_snapshot(db, store, record.id, tmp_path / "out")


async def test_a_capture_waiting_for_the_gc_does_not_trust_what_the_gc_just_deleted(
    db: Database, tmp_path: Path
) -> None:
    """The GC runs while a capture waits for the lock; meanwhile retention drops the only
    READY snapshot holding the capture's blob. The capture must upload it again."""
    store = FsObjectStore(tmp_path / "objects", fsync=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.bin").write_bytes(b"shared by an old snapshot")
    old = await archive.record_snapshot(db, store, ws, session_id="old")
    (ws / "more.bin").write_bytes(b"makes the new snapshot differ")
    async with db.transaction() as gc_conn:
        await rows.lock_for_gc(gc_conn)
        capture = asyncio.create_task(archive.record_snapshot(db, store, ws, session_id="new"))
        while not await db.fetch("SELECT 1 AS waiting FROM pg_locks "
                                 "WHERE locktype = 'advisory' AND NOT granted"):
            assert not capture.done(), capture
            await asyncio.sleep(0.01)
        await db.fetch("DELETE FROM onebox.snapshots WHERE id = %s RETURNING id", (old.id,))
        report = await archive.collect_locked(gc_conn, store)
    assert blob_key(hashlib.sha256(b"shared by an old snapshot").hexdigest()) in \
        report.objects_deleted
    record = await capture
    await archive.restore_snapshot(db, store, record.id, tmp_path / "out")
    assert (tmp_path / "out/data.bin").read_bytes() == b"shared by an old snapshot"


async def test_a_file_changed_while_copied_makes_the_snapshot_start_again(
        db: Database, store: FsObjectStore, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A parallel step of the session writes between the scan and the copy (the quickstart's
    two middle steps): the snapshot is taken again, and holds the file as it is now. A file
    that never stops changing still fails, naming it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "revenue.json").write_text("{}")
    real_capture = archive.capture
    writes = iter(['{"north": 1}', '{"north": 1, "south": 2}'])

    async def a_sibling_writes_once(*args: Any, **kwargs: Any) -> Any:
        text = next(writes, None)
        if text is not None and len(text) < 20:
            (workspace / "revenue.json").write_text(text)  # after the scan, before the copy
        return await real_capture(*args, **kwargs)

    monkeypatch.setattr(archive, "capture", a_sibling_writes_once)
    exec_id = await insert_execution(db, "parallel")
    taken = await archive.snapshot_step(db, store, workspace, session_id="parallel",
                                        execution_id=exec_id, policy="always", failed=False)
    assert taken is not None and (await execution_links(db, exec_id))[1] == taken
    restored = tmp_path / "restored"
    await archive.restore_snapshot(db, store, taken, restored)
    assert (restored / "revenue.json").read_text() == '{"north": 1}'

    async def never_settles(*args: Any, **kwargs: Any) -> Any:
        (workspace / "revenue.json").write_text(os.urandom(8).hex())
        return await real_capture(*args, **kwargs)

    monkeypatch.setattr(archive, "capture", never_settles)
    (workspace / "revenue.json").write_text(os.urandom(8).hex())  # a blob not stored yet
    with pytest.raises(StorageError, match="revenue.json changed while"):
        await archive.snapshot_step(db, store, workspace, session_id="restless",
                                    execution_id=await insert_execution(db, "restless"),
                                    policy="always", failed=False)
