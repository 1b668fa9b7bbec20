"""Replay: a recorded step re-runs from its pre-execution snapshot in a fresh session,
and the report says whether exit code, stdout, stderr, files and output hash match.

``SubprocessBackend`` is a minimal stand-in (the sandbox is not under test here); a
test at the end replays through the real backend from ``onebox.sandbox.registry``."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from psycopg.types.json import Jsonb
from test_snapshot_archive import insert_execution  # noqa: I001 - sibling test module

from onebox.config import Settings
from onebox.errors import ValidationError
from onebox.objects import FsObjectStore
from onebox.sandbox.base import ExecRequest, ExecResult, Health, SandboxBackend
from onebox.snapshots import archive
from onebox.snapshots.replay import replay, restore_into_session
from onebox.store.db import Database

RUNNERS = {"python": [sys.executable, "-c"], "bash": ["bash", "-c"]}


class SubprocessBackend(SandboxBackend):
    """Runs code as a plain subprocess in the session directory. No isolation: tests only."""

    name = "test-subprocess"

    def __init__(self, root: Path) -> None:
        self.root = root

    def workspace(self, session_id: str) -> Path:
        return self.root / session_id

    async def execute(self, request: ExecRequest) -> ExecResult:
        ws = self.workspace(request.session_id)
        ws.mkdir(parents=True, exist_ok=True)
        proc = await asyncio.create_subprocess_exec(
            *RUNNERS[request.language], request.code or "", cwd=ws,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        return ExecResult(ok=proc.returncode == 0, exit_code=proc.returncode,
                          stdout=out.decode(), stderr=err.decode(), duration_ms=1.0)

    async def cleanup(self, session_id: str) -> None:
        shutil.rmtree(self.workspace(session_id), ignore_errors=True)

    def health(self) -> Health:
        return Health(ok=True, backend=self.name, isolation="none")


def simple_hash(result: ExecResult) -> str:
    return hashlib.sha256(f"{result.exit_code}|{result.stdout}|{result.stderr}".encode()).hexdigest()


async def run_recorded_step(
    db: Database, store: FsObjectStore, backend: SandboxBackend, session_id: str, code: str,
    language: str = "python", policy: archive.Policy = "always",
    hash_output: Callable[[ExecResult], str] = simple_hash,
) -> uuid.UUID:
    """What the executor does: row, pre snapshot, execute, post snapshot, archive outputs."""
    details = {"code": code, "language": language, "limits": {"timeout_s": 30, "memory_mb": 256}}
    exec_id = await insert_execution(db, session_id, details)
    ws = backend.workspace(session_id)
    await archive.snapshot_before_step(db, store, ws, session_id=session_id,
                                       execution_id=exec_id, policy=policy)
    result = await backend.execute(ExecRequest(session_id=session_id, code=code,
                                               language=language))  # type: ignore[arg-type]
    await archive.snapshot_step(db, store, ws, session_id=session_id, execution_id=exec_id,
                                policy=policy, failed=not result.ok)
    status = "SUCCESS" if result.ok else "FAILED"
    await db.fetch(
        "UPDATE onebox.task_execution SET status = %s, exit_code = %s, stdout = %s, stderr = %s,"
        " output_hash = %s WHERE id = %s RETURNING id",
        (status, result.exit_code, result.stdout, result.stderr,
         hash_output(result) if result.ok else None, exec_id))
    return exec_id


@pytest.fixture
def store(tmp_path: Path) -> FsObjectStore:
    return FsObjectStore(tmp_path / "objects", fsync=False)


@pytest.fixture
def backend(tmp_path: Path) -> SubprocessBackend:
    return SubprocessBackend(tmp_path / "workspaces")


STEP1 = "open('data.txt', 'w').write('3 4 5')"
STEP2 = ("nums = [int(x) for x in open('data.txt').read().split()]\n"
         "open('sum.txt', 'w').write(str(sum(nums)))\nprint('sum', sum(nums))")


async def test_replay_reproduces_a_step_from_its_real_inputs(
    db: Database, store: FsObjectStore, backend: SubprocessBackend
) -> None:
    await run_recorded_step(db, store, backend, "s1", STEP1)
    second = await run_recorded_step(db, store, backend, "s1", STEP2)
    (backend.workspace("s1") / "data.txt").write_text("100")  # the live session moved on
    report = await replay(db, backend, store, second, hash_output=simple_hash)
    assert report.match, report.to_json()
    assert report.pre_source == "recorded" and report.files_compared_with == "snapshot"
    assert report.result.stdout == "sum 12\n"
    assert report.recorded_output_hash == report.replayed_output_hash
    assert not backend.workspace(report.session_id).exists()  # the replay session is cleaned


async def test_replay_reports_a_diff_when_the_step_is_not_deterministic(
    db: Database, store: FsObjectStore, backend: SubprocessBackend
) -> None:
    code = "import uuid; print(uuid.uuid4()); open('id.txt','w').write(uuid.uuid4().hex)"
    exec_id = await run_recorded_step(db, store, backend, "s2", code)
    report = await replay(db, backend, store, exec_id, hash_output=simple_hash)
    assert not report.match
    assert report.stdout_diff.startswith("--- recorded/stdout\n+++ replayed/stdout\n")
    assert report.stderr_diff == ""
    assert report.files.changed == ("id.txt",)
    assert report.recorded_output_hash != report.replayed_output_hash
    assert report.to_json()["files"] == {"added": [], "removed": [], "changed": ["id.txt"]}


async def test_replay_detects_a_changed_exit_code_and_stderr(
    db: Database, store: FsObjectStore, backend: SubprocessBackend
) -> None:
    exec_id = await run_recorded_step(db, store, backend, "s3", "exit 3", language="bash")
    await db.fetch("UPDATE onebox.task_execution SET exit_code = 0, stderr = 'boom' "
                   "WHERE id = %s RETURNING id", (exec_id,))
    report = await replay(db, backend, store, exec_id)
    assert not report.match
    assert (report.recorded_exit_code, report.replayed_exit_code) == (0, 3)
    assert "-boom" in report.stderr_diff


async def test_without_a_pre_snapshot_the_inputs_are_derived_from_the_session(
    db: Database, store: FsObjectStore, backend: SubprocessBackend
) -> None:
    await run_recorded_step(db, store, backend, "s4", STEP1)
    second = await run_recorded_step(db, store, backend, "s4", STEP2)
    await db.fetch("UPDATE onebox.task_execution SET pre_snapshot_id = NULL WHERE id = %s "
                   "RETURNING id", (second,))
    await db.fetch("DELETE FROM onebox.snapshots WHERE kind = 'pre' RETURNING id")
    report = await replay(db, backend, store, second)
    assert report.pre_source == "derived" and report.match, report.to_json()


async def test_a_step_without_recorded_code_cannot_be_replayed(
    db: Database, store: FsObjectStore, backend: SubprocessBackend
) -> None:
    exec_id = await insert_execution(db, "s5", {"language": "python"})
    with pytest.raises(ValidationError, match="details.code"):
        await replay(db, backend, store, exec_id)
    approval = await insert_execution(db, "s5", {"language": "approval", "code": None})
    with pytest.raises(ValidationError, match="'approval', which runs no code"):
        await replay(db, backend, store, approval)


async def test_restore_into_a_new_session(
    db: Database, store: FsObjectStore, backend: SubprocessBackend
) -> None:
    await run_recorded_step(db, store, backend, "s6", STEP1)
    snap = (await db.fetch("SELECT id FROM onebox.snapshots WHERE kind = 'post'"))[0]["id"]
    opened = await restore_into_session(db, store, backend, str(snap))
    assert opened.session_id != "s6"
    result = await backend.execute(ExecRequest(session_id=opened.session_id,
                                               code="print(open('data.txt').read())"))
    assert result.stdout == "3 4 5\n"


@pytest.mark.parametrize("kind", ["process", "linux"])
async def test_replay_with_the_real_sandbox_backend(
    db: Database, store: FsObjectStore, settings: Settings, kind: str
) -> None:
    registry = pytest.importorskip("onebox.sandbox.registry")
    if kind == "linux" and registry.linux_available():
        pytest.skip("; ".join(registry.linux_available()))
    settings.sandbox.backend = kind  # type: ignore[assignment]
    real: SandboxBackend = registry.get_backend(settings)
    from onebox.runtime.engine.archive import output_hash  # the hash the executor records

    try:
        await run_recorded_step(db, store, real, "real-1", STEP1, hash_output=output_hash)
        second = await run_recorded_step(db, store, real, "real-1", STEP2,
                                         hash_output=output_hash)
        report = await replay(db, real, store, second, hash_output=output_hash)
        assert report.match, report.to_json()
        assert report.replayed_output_hash is not None
        assert report.result.stdout == "sum 12\n" and report.result.backend == real.name
        changed = await run_recorded_step(db, store, real, "real-1",
                                          "import os; print(os.urandom(8).hex())")
        assert not (await replay(db, real, store, changed)).match
    finally:
        await real.cleanup("real-1")
        await real.close()


async def test_files_written_by_a_step_running_at_the_same_time_are_not_held_against_replay(
    db: Database, store: FsObjectStore, backend: SubprocessBackend
) -> None:
    """Two steps share a session and overlap in time: A's post snapshot holds B's file.
    Replaying A leaves B's file out; if B had not overlapped, the file would count."""
    ws = backend.workspace("par")
    ids = {}
    for name in ("a", "b"):
        code = f"open('{name}.txt', 'w').write('{name}')"
        ids[name] = await insert_execution(db, "par", {"code": code, "language": "python"})
        await archive.snapshot_before_step(db, store, ws, session_id="par",
                                           execution_id=ids[name], policy="always")
    for name in ("a", "b"):
        await backend.execute(ExecRequest(session_id="par", code=f"open('{name}.txt', 'w')"
                                                               f".write('{name}')"))
    for name in ("a", "b"):
        await archive.snapshot_step(db, store, ws, session_id="par", execution_id=ids[name],
                                    policy="always", failed=False)
    b_written = [{"path": "b.txt", "change": "created", "size": 1,
                  "sha256": hashlib.sha256(b"b").hexdigest()}]
    for name, start, end in (("a", "1 minute", "10 seconds"), ("b", "30 seconds", "5 seconds")):
        await db.fetch(
            "UPDATE onebox.task_execution SET status = 'SUCCESS', exit_code = 0, stdout = '', "
            "stderr = '', step_id = %s, started_at = now() - %s::interval, "
            "finished_at = now() - %s::interval, details = details || %s WHERE id = %s "
            "RETURNING id", (f"step_{name}", start, end,
                             Jsonb({"files_written": b_written if name == "b" else []}),
                             ids[name]))
    report = await replay(db, backend, store, ids["a"])
    assert report.match, report.to_json()
    assert (report.concurrent_steps, report.excluded_paths) == (("step_b",), ("b.txt",))
    await db.fetch("UPDATE onebox.task_execution SET started_at = now(), finished_at = now() "
                   "WHERE id = %s RETURNING id", (ids["b"],))
    alone = await replay(db, backend, store, ids["a"])
    assert not alone.match and alone.files.removed == ("b.txt",)
