"""Host-side code never trusts a workspace, and a step cannot stall the supervisor.

The attacker owns the workspace: a host thread (or sandboxed code) swaps a directory
for a symlink to a root-only host directory while the host restores, lists or diffs
it; plants $ONEBOX_RESULT as a symlink, a FIFO or /dev/zero; writes sparse files and
trees deeper than Python's recursion limit. Each case failed on the code before
hostfs (see the module docstring of onebox.sandbox.hostfs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sbx_helpers import sh

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.errors import StorageError
from onebox.objects.fs import FsObjectStore
from onebox.runtime.agent.steps import _read_json
from onebox.runtime.services import runs as runs_api
from onebox.runtime.services.service import Runtime
from onebox.runtime.services.workspace_files import list_files
from onebox.sandbox import workspace as ws_mod
from onebox.sandbox.linux import BwrapSandbox
from onebox.sandbox.snapshots import capture, restore, scan
from onebox.store.db import Database

ROUNDS = 200
HOST_FILE = "host-only-secret.txt"


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A root-only host directory the attacker must never reach."""
    target = tmp_path / "host-private"
    target.mkdir(mode=0o700)
    (target / HOST_FILE).write_text('{"leaked": true}')
    os.chmod(target / HOST_FILE, 0o600)
    return target


def host_state(target: Path) -> tuple[list[str], int]:
    return sorted(os.listdir(target)), stat.S_IMODE(target.stat().st_mode)


ATTACK = """
import os, sys, time
root, host = sys.argv[1], sys.argv[2]
link, real = os.path.join(root, "d"), os.path.join(root, "d.real")
while True:
    try:
        os.rename(link, real)
        os.symlink(host, link)
        time.sleep(0.0001)
        os.unlink(link)
        os.rename(real, link)
        time.sleep(0.0001)
    except OSError:
        pass
"""


@pytest.fixture
def swapper(host_dir: Path) -> Iterator[Callable[[Path], None]]:
    """Starts a process that keeps swapping ``root/d`` between a real directory and a
    symlink to the host directory, as sandboxed code in the session would (a separate
    process, so it runs truly concurrently with the host code under test)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(root: Path) -> None:
        procs.append(subprocess.Popen([sys.executable, "-c", ATTACK, str(root), str(host_dir)]))
        time.sleep(0.1)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _tree(root: Path) -> None:
    (root / "d" / "e").mkdir(parents=True)
    for i in range(20):
        (root / "d" / f"f{i}.txt").write_text(f"file {i}")
    (root / "d" / "e" / "g.txt").write_text("deep")
    for path in (root / "d", root / "d" / "e", *(root / "d").glob("*.txt")):
        os.chmod(path, 0o777)


async def test_restore_racing_a_symlink_swap_never_touches_the_host_dir(
    tmp_path: Path, host_dir: Path, swapper: Callable[[Path], None]
) -> None:
    store = FsObjectStore(tmp_path / "objects")
    source = tmp_path / "source"
    _tree(source)
    info = await capture(store, source)
    into = tmp_path / "workspace"
    into.mkdir()
    swapper(into)
    before, restored = host_state(host_dir), 0
    for _ in range(ROUNDS):
        with contextlib.suppress(Exception):  # the workspace changed under it: refusing is fine
            await restore(store, info.sha256, into)
            restored += 1
        assert host_state(host_dir) == before
        for child in list(into.iterdir()):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    assert host_state(host_dir) == before and restored > ROUNDS // 2


async def test_restore_holds_the_session_so_no_code_runs_meanwhile(
    linux: BwrapSandbox, tmp_path: Path
) -> None:
    session = "hold-restore"
    await sh(linux, "pass", session=session)
    order: list[str] = []
    async with linux.hold(session):
        running = asyncio.ensure_future(sh(linux, "print('ran')", session=session))
        await asyncio.sleep(0.3)
        order.append("restore done")
    result = await running
    order.append("code ran")
    assert result.stdout == "ran\n" and order == ["restore done", "code ran"]
    await linux.cleanup(session)


def test_listing_racing_a_symlink_swap_never_shows_host_entries(
    tmp_path: Path, swapper: Callable[[Path], None]
) -> None:
    root = tmp_path / "workspace"
    _tree(root)
    swapper(root)
    for _ in range(ROUNDS):
        paths = [f["path"] for f in list_files(root)]  # raising here was the API's 500
        assert not any(HOST_FILE in p for p in paths), paths


def test_files_written_racing_a_symlink_swap_never_shows_host_entries(
    tmp_path: Path, swapper: Callable[[Path], None]
) -> None:
    root = tmp_path / "workspace"
    _tree(root)
    for i in range(300):  # listed between the lstat of d and the walk into it
        (root / f"z{i:03d}").write_text("z")
    empty = ws_mod.snapshot(tmp_path / "missing")
    swapper(root)
    for _ in range(ROUNDS):
        after = ws_mod.snapshot(root)
        changes = ws_mod.diff(root, empty, after)
        assert not any(HOST_FILE in c.path for c in changes)
        assert not any(HOST_FILE in p for p in after)


def _result_file(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "workspace"
    (root / ".onebox").mkdir(parents=True)
    return root, ".onebox/step.result.json"


def _with_timeout(func: Callable[[], object], timeout_s: float = 20) -> object:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(func).result(timeout=timeout_s)
    finally:
        pool.shutdown(wait=False)


def test_result_file_as_a_symlink_to_a_root_only_file_is_not_read(
    tmp_path: Path, host_dir: Path
) -> None:
    root, rel = _result_file(tmp_path)
    os.symlink(host_dir / HOST_FILE, root / rel)
    assert (root / rel).read_text() == '{"leaked": true}'  # the probe reaches its target
    assert _read_json(root, rel) is None
    os.unlink(root / rel)
    os.rmdir(root / ".onebox")
    os.symlink(host_dir, root / ".onebox")  # a symlinked parent directory too
    assert _read_json(root, ".onebox/" + HOST_FILE) is None


def test_result_file_as_a_fifo_does_not_hang_the_worker(tmp_path: Path) -> None:
    root, rel = _result_file(tmp_path)
    os.mkfifo(root / rel)
    assert _with_timeout(lambda: _read_json(root, rel)) is None


def test_result_file_as_dev_zero_is_bounded(tmp_path: Path) -> None:
    root, rel = _result_file(tmp_path)
    os.symlink("/dev/zero", root / rel)
    assert _with_timeout(lambda: _read_json(root, rel)) is None
    os.unlink(root / rel)
    with open(root / rel, "wb") as f:
        f.truncate(1 << 40)  # a 1 TiB sparse file: refused by its size, not read
    assert _with_timeout(lambda: _read_json(root, rel)) is None


SPARSE_FILES = 40
SPARSE = f"""
import os
for i in range({SPARSE_FILES}):
    with open(f"sparse{{i:02d}}.bin", "wb") as f:
        f.truncate(31 << 20)  # just under the 32 MB disk cap (RLIMIT_FSIZE), nothing allocated
print("ok")
"""


async def test_sparse_files_are_listed_unhashed_and_snapshot_as_holes(
    linux: BwrapSandbox, tmp_path: Path,
) -> None:
    """1.2 GB of apparent size in a 32 MB workspace: files_written hashes only up to its
    budget (apparent size) and lists the rest with a reason; a snapshot stores the holes
    as nothing (test_sparse_snapshots.py has the restore)."""
    session = "sparse-files"
    result = await sh(linux, SPARSE, session=session)
    assert result.ok, result.stderr
    written = {c.path: c for c in result.files_written}
    assert len(written) == SPARSE_FILES and all(c.size == 31 << 20 for c in written.values())
    unhashed = [c for c in written.values() if c.sha256 is None]
    hashed = SPARSE_FILES - len(unhashed)
    assert hashed * (31 << 20) <= ws_mod.HASH_BUDGET_BYTES and unhashed
    assert all(c.note and "hash budget" in c.note for c in unhashed)
    info = await capture(FsObjectStore(tmp_path / "objects", fsync=False),
                         linux.workspace(session))
    assert info.bytes == SPARSE_FILES * (31 << 20) and info.stored_bytes < 64 << 10
    await linux.cleanup(session)


async def test_the_data_of_sparse_files_cannot_carry_more_than_the_disk_cap_into_a_snapshot(
    linux: BwrapSandbox,
) -> None:
    """The bound of a snapshot is the workspace's disk cap, counted in data bytes: a 32 MB
    workspace whose files hold more data than that (the kernel lets a file system report
    more than it holds) is refused by name, whatever their holes."""
    session = "sparse-cap"
    code = SPARSE.replace(f"range({SPARSE_FILES})", "range(10)").replace(
        "f.truncate(31 << 20)", "f.truncate(31 << 20); f.seek(1 << 20); f.write(b'x' * 4096)")
    assert (await sh(linux, code, session=session)).ok
    workspace = linux.workspace(session)
    assert os.path.ismount(workspace), "the probe needs the loop-mounted disk cap"
    with pytest.raises(StorageError, match="max_bytes") as refused:
        await asyncio.to_thread(scan, workspace, max_bytes=9 * 4096)
    assert "bytes of data" in str(refused.value)
    assert (await asyncio.to_thread(scan, workspace)).total_bytes == 10 * (31 << 20)
    await linux.cleanup(session)


def test_the_snapshot_bound_counts_data_and_apparent_size(tmp_path: Path) -> None:
    from onebox.sandbox import snapshot_files

    with open(tmp_path / "sparse.bin", "wb") as f:
        f.truncate(64 << 20)  # 64 MB apparent, nothing allocated
    assert (tmp_path / "sparse.bin").stat().st_blocks == 0
    assert scan(tmp_path, max_bytes=32 << 20).total_bytes == 64 << 20
    bound = snapshot_files.MAX_APPARENT_BYTES
    try:
        snapshot_files.MAX_APPARENT_BYTES = 32 << 20
        with pytest.raises(StorageError, match="max_apparent_bytes"):
            scan(tmp_path, max_bytes=32 << 20)
    finally:
        snapshot_files.MAX_APPARENT_BYTES = bound


DEEP = "import os\nfor _ in range(1200):\n    os.mkdir('d'); os.chdir('d')\nprint('deep')\n"


async def test_a_1200_deep_tree_fails_the_snapshot_not_the_step(
    db: Database, settings: Settings
) -> None:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    settings.runtime.heartbeat_s = 0.2
    backend = get_backend(settings)
    rt = Runtime(settings, db, backend)
    try:
        run = await rt.run_plan(parse_plan({"steps": [
            {"id": "deep", "tool": "python", "code": DEEP},
            {"id": "after", "tool": "bash", "code": "echo next", "depends_on": ["deep"]}]}))
        assert run["status"] == "SUCCEEDED", run.get("error")
        steps = await runs_api.run_steps(db, run["id"])
        assert [(s["step_id"], s["status"]) for s in steps] == [
            ("deep", "SUCCESS"), ("after", "SUCCESS")]
        assert steps[0]["stdout"] == "deep\n"
        assert steps[0]["details"]["files_truncated"] is True  # the listing stopped at a bound
        events = await runs_api.run_events(db, run["id"])
        failed = [e for e in events if e["type"] == "snapshot_failed"]
        assert failed and all(e["payload"]["bound"] == "max_depth" for e in failed)
        assert "max_depth" in failed[0]["payload"]["error"]
    finally:
        await backend.close()
