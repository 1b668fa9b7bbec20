"""The CLI as a user runs it: `onebox snapshot list|show|restore|gc` and `onebox replay`,
each a subprocess against the test database, with stable --json output."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_snapshot_archive import insert_execution

from onebox.cli.main import main
from onebox.config import Settings
from onebox.objects import FsObjectStore
from onebox.sandbox.base import ExecRequest
from onebox.snapshots import archive
from onebox.store.db import Database


def _env(settings: Settings) -> dict[str, str]:
    return {"ONEBOX_HOME": str(settings.home), "ONEBOX_SANDBOX__BACKEND": "process",
            "ONEBOX_DATABASE_URL": settings.database_url.get_secret_value()}  # type: ignore[union-attr]


async def onebox(settings: Settings, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process (in a thread, as it runs its own event loop)."""
    runner = CliRunner()
    result = await asyncio.to_thread(runner.invoke, main, list(args), env=_env(settings))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


async def onebox_subprocess(settings: Settings, *args: str) -> tuple[int, str, str]:
    """Run the CLI as a user does: a new process through the installed entry point."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from onebox.cli.main import main; main()", *args,
        env={**os.environ, **_env(settings)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def onebox_json(settings: Settings, *args: str) -> Any:
    code, out, err = await onebox(settings, *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
async def recorded(db: Database, settings: Settings) -> dict[str, Any]:
    """One step run through the process sandbox and archived the way the executor does it."""
    from onebox.runtime.engine.archive import output_hash
    from onebox.sandbox.registry import get_backend

    settings.sandbox.backend = "process"
    backend = get_backend(settings)
    store = FsObjectStore(settings.objects_dir)
    code = "open('out.txt', 'w').write('42'); print('answer', 42)"
    details = {"code": code, "language": "python", "limits": {"timeout_s": 30}}
    exec_id = await insert_execution(db, "cli-s", details)
    ws = backend.workspace("cli-s")
    try:
        pre = await archive.snapshot_before_step(db, store, ws, session_id="cli-s",
                                                 execution_id=exec_id, policy="always")
        result = await backend.execute(ExecRequest(session_id="cli-s", code=code))
        post = await archive.snapshot_step(db, store, ws, session_id="cli-s",
                                           execution_id=exec_id, policy="always", failed=False)
    finally:
        await backend.cleanup("cli-s")
        await backend.close()
    await db.fetch(
        "UPDATE onebox.task_execution SET status = 'SUCCESS', exit_code = %s, stdout = %s, "
        "stderr = %s, output_hash = %s WHERE id = %s RETURNING id",
        (result.exit_code, result.stdout, result.stderr, output_hash(result), exec_id))
    return {"execution_id": exec_id, "pre": pre, "post": post}


async def test_list_show_and_restore(db: Database, settings: Settings,
                                     recorded: dict[str, Any], tmp_path: Path) -> None:
    listed = await onebox_json(settings, "snapshot", "list", "--session", "cli-s")
    assert [s["id"] for s in listed["snapshots"]] == [str(recorded["post"]), str(recorded["pre"])]
    first = listed["snapshots"][0]
    assert {"id", "session_id", "execution_id", "kind", "status", "sha256", "bytes",
            "file_count", "created_at"} <= first.keys()
    assert (first["kind"], first["status"], first["file_count"]) == ("post", "READY", 1)
    by_exec = await onebox_json(settings, "snapshot", "list", "--execution",
                                str(recorded["execution_id"]))
    assert len(by_exec["snapshots"]) == 2
    run_id = (await db.fetch("SELECT run_id FROM onebox.task_execution WHERE id = %s",
                             (recorded["execution_id"],)))[0]["run_id"]
    by_run = await onebox_json(settings, "snapshot", "list", "--run", str(run_id))
    assert by_run == by_exec
    none = await onebox_json(settings, "snapshot", "list", "--run", str(uuid.uuid4()))
    assert none == {"snapshots": []}
    changes = await onebox_json(settings, "snapshot", "diff", str(recorded["pre"]),
                                str(recorded["post"]))
    assert changes == {"added": ["out.txt"], "removed": [], "changed": []}
    shown = await onebox_json(settings, "snapshot", "show", str(recorded["post"])[:8])
    assert shown["entries"] == [{"path": "out.txt", "type": "file", "mode": shown["entries"][0]
                                 ["mode"], "size": 2, "sha256": shown["entries"][0]["sha256"]}]
    restored = await onebox_json(settings, "snapshot", "restore", str(recorded["post"]),
                                 "--into", str(tmp_path / "r"))
    assert restored["file_count"] == 1 and (tmp_path / "r/out.txt").read_text() == "42"
    code, _, err = await onebox(settings, "snapshot", "restore", str(recorded["post"]),
                                "--into", str(tmp_path / "r"))
    assert code != 0 and "not empty" in err
    code, _, err = await onebox(settings, "snapshot", "show", str(uuid.uuid4()))
    assert code != 0 and "not found" in err
    for bad in (["replay", "not-an-id"], ["snapshot", "list", "--execution", "nope"],
                ["snapshot", "show", "zz"]):
        code, _, err = await onebox(settings, *bad)
        assert code == 2 and "error:" in err and "Traceback" not in err


async def test_replay_prints_match_or_a_diff(db: Database, settings: Settings,
                                             recorded: dict[str, Any]) -> None:
    exec_id = str(recorded["execution_id"])
    report = await onebox_json(settings, "replay", exec_id)
    assert report["match"] is True and report["pre_source"] == "recorded"
    assert report["output_hash"]["recorded"] == report["output_hash"]["replayed"]
    code, out, _ = await onebox_subprocess(settings, "replay", exec_id)
    assert code == 0 and "match" in out
    await db.fetch("UPDATE onebox.task_execution SET stdout = 'answer 41\n' WHERE id = %s "
                   "RETURNING id", (recorded["execution_id"],))
    code, out, _ = await onebox(settings, "replay", exec_id)
    assert code == 1
    assert "mismatch" in out and "-answer 41" in out and "+answer 42" in out


async def test_gc_reports_and_deletes_unreferenced_objects(
    db: Database, settings: Settings, recorded: dict[str, Any]
) -> None:
    await db.fetch("DELETE FROM onebox.snapshots WHERE id = %s RETURNING id", (recorded["post"],))
    dry = await onebox_json(settings, "snapshot", "gc", "--dry-run")
    assert dry["objects_deleted"] == 2 and dry["dry_run"] is True  # out.txt's blob + manifest
    done = await onebox_json(settings, "snapshot", "gc")
    assert done["objects_deleted"] == 2
    assert (await onebox_json(settings, "snapshot", "gc"))["objects_deleted"] == 0


async def test_restore_into_a_new_sandbox_session(settings: Settings,
                                                  recorded: dict[str, Any]) -> None:
    data = await onebox_json(settings, "snapshot", "restore", str(recorded["post"]),
                             "--session")
    assert data["session_id"].startswith("api-") and data["file_count"] == 1
    assert (Path(data["into"]) / "out.txt").read_text() == "42"
    assert Path(data["into"]).parent == settings.workspaces_dir.resolve()
    # The session is one `onebox exec` (and the API) knows: the docs' promise.
    code, printed, err = await onebox(settings, "exec", "--session", data["session_id"],
                                      "--json", "--", "print(open('out.txt').read())")
    assert code == 0, err
    assert json.loads(printed)["stdout"] == "42\n"
    code, _, err = await onebox(settings, "snapshot", "restore", str(recorded["post"]))
    assert code == 2 and "--into" in err
