"""Shared files under one ONEBOX_HOME, and nothing left behind by a process that died.

Every onebox process is a subprocess here (the CLI as a user runs it). The sandboxes of one
test run as session uids from a range of their own, so "the bwrap processes of this home"
are the processes whose uid is in that range.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from onebox.config import load_settings

ONEBOX = str(Path(sys.executable).with_name("onebox"))
QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart.yaml"
SETTLE_S = 30.0
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts and session uids need root")


class Home:
    def __init__(self, path: Path) -> None:
        self.path = path
        uid_min = random.randrange(3_000_000, 9_000_000, 1000)
        self.uids = range(uid_min, uid_min + 500)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("DATABASE_URL", "ONEBOX_DATABASE_URL")}
        self.env.update({
            "ONEBOX_HOME": str(path), "ONEBOX_SANDBOX__SESSION_UID_MIN": str(uid_min),
            "ONEBOX_SANDBOX__SESSION_UID_MAX": str(uid_min + 499),
            "ONEBOX_RUNTIME__LEASE_S": "3", "ONEBOX_RUNTIME__HEARTBEAT_S": "0.3",
            "ONEBOX_RUNTIME__POLL_S": "0.2"})
        self.sandbox_dir = load_settings(home=path).sandbox_dir

    def run(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ONEBOX, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout_s)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([ONEBOX, *args], env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)

    def mounts(self) -> set[str]:
        prefix = str(self.sandbox_dir) + "/"
        points = (line.split()[4] for line in
                  Path("/proc/self/mountinfo").read_text().splitlines())
        return {p for p in points if p.startswith(prefix)}

    def sandbox_pids(self) -> set[int]:
        """Processes running as one of this home's session uids (bwrap and what it runs)."""
        found = set()
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and entry.stat().st_uid in self.uids:
                    found.add(int(entry.name))
            except OSError:
                continue
        return found

    def entries(self, *, except_pid: int | None = None) -> set[str]:
        """The per-process and per-session entries: pool, run dirs, workspaces, images."""
        found = set()
        for sub in ("pool", "run", "workspaces", "images", "owners"):
            root = self.sandbox_dir / sub
            for entry in (os.listdir(root) if root.is_dir() else ()):
                if except_pid is not None and entry.startswith(f"{except_pid}-"):
                    continue
                if not entry.startswith("template-"):
                    found.add(f"{sub}/{entry}")
        return found

    def show(self, run_id: str) -> dict:  # type: ignore[type-arg]
        shown = self.run("show", run_id, "--json")
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)  # type: ignore[no-any-return]

    def submit(self, plan: Path) -> str:
        submitted = self.run("run", str(plan), "--detach", "--json")
        assert submitted.returncode == 0, submitted.stderr
        return str(json.loads(submitted.stdout)["run_id"])


@pytest.fixture
def home() -> Iterator[Home]:
    path = Path(tempfile.mkdtemp(prefix="onebox-leftovers-"))
    path.chmod(0o755)
    h = Home(path)
    yield h
    h.run("db", "stop", timeout_s=60)
    for mount in sorted(h.mounts(), reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(h.sandbox_dir, ignore_errors=True)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not reached in {timeout_s:.0f} s: {what}"
        time.sleep(0.2)


def stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.stderr.read() if proc.stderr else ""


def status_of(home: Home, run_id: str) -> str:
    return str(home.show(run_id)["run"]["status"])


def test_up_plus_10_foreground_runs_share_the_home(home: Home) -> None:
    """Foreground runs come and go beside `onebox up`; none deletes what another uses."""
    init = home.run("db", "status")  # starts the embedded database once, before the crowd
    assert init.returncode in (0, 1), init.stderr
    up = home.start("up", "--port", "0", "--no-auth")
    try:
        with ThreadPoolExecutor(max_workers=10) as pool:
            done = list(pool.map(lambda _: home.run("run", str(QUICKSTART), "--json"),
                                 range(10)))
        failed = [(r.returncode, r.stderr[-800:]) for r in done if r.returncode != 0]
        assert not failed, failed
        # After every foreground process has exited, `up` alone runs new sessions.
        later = [home.submit(QUICKSTART) for _ in range(4)]
        wait_for("the runs of `up` finish", lambda: all(
            status_of(home, r) in ("SUCCEEDED", "FAILED", "DEAD", "CANCELLED") for r in later))
        assert [status_of(home, r) for r in later] == ["SUCCEEDED"] * 4, stop(up)[-3000:]
        assert up.poll() is None, stop(up)[-3000:]
    finally:
        stop(up)


def _plan(tmp_path: Path, name: str, sleep_s: float) -> Path:
    plan = tmp_path / f"{name}.yaml"
    plan.write_text(
        "steps:\n"
        "  - id: write\n    tool: bash\n    code: echo kept > kept.txt\n"
        f"  - id: slow\n    tool: bash\n    depends_on: [write]\n"
        f"    code: sleep {sleep_s}; cat kept.txt\n")
    return plan


def _running_everywhere(home: Home, workers: list[subprocess.Popen[str]],
                        run_ids: list[str]) -> bool:
    pool = home.sandbox_dir / "pool"
    pools = os.listdir(pool) if pool.is_dir() else []
    filled = all(any(p.startswith(f"{w.pid}-") and os.listdir(pool / p) for p in pools)
                 for w in workers)
    steps = [s for r in run_ids for s in home.show(r)["steps"]]
    slow = [s for s in steps if s["step_id"] == "slow" and s["status"] == "RUNNING"]
    return filled and len(slow) == len(run_ids)


def test_killed_workers_leave_nothing_behind(home: Home, tmp_path: Path) -> None:
    """SIGKILL two workers holding warm pools and running steps; a new worker sweeps what they
    left (mounts, sandboxes, directories) but keeps the workspace of a run that will resume."""
    doomed = [home.submit(_plan(tmp_path, "doomed", 300)) for _ in range(2)]
    resumed = home.submit(_plan(tmp_path, "resumed", 6))
    base_mounts, base_entries = home.mounts(), home.entries()
    assert not home.sandbox_pids()
    workers = [home.start("worker", "--concurrency", "2") for _ in range(2)]
    try:
        wait_for("both workers hold a warm pool and run the slow steps",
                 lambda: _running_everywhere(home, workers, [*doomed, resumed]))
        assert home.mounts() - base_mounts and home.sandbox_pids()
        for w in workers:
            w.kill()
            w.wait(10)
        for run_id in doomed:
            assert home.run("cancel", run_id).returncode == 0
        after = home.start("worker", "--concurrency", "2")
        try:
            wait_for("the interrupted run resumes in its kept workspace",
                     lambda: status_of(home, resumed) in ("SUCCEEDED", "FAILED", "DEAD"))
            slow = [s for s in home.show(resumed)["steps"] if s["step_id"] == "slow"]
            assert slow[-1]["status"] == "SUCCESS" and slow[-1]["stdout"] == "kept\n", slow
            settled = time.monotonic()
            wait_for("mounts, sandboxes and directories are back to the baseline", lambda: (
                home.mounts() <= base_mounts | _own_mounts(home, after.pid)
                and not home.sandbox_pids() - _own_sandboxes(after.pid)
                and home.entries(except_pid=after.pid) <= base_entries), SETTLE_S)
            assert time.monotonic() - settled <= SETTLE_S
        finally:
            stop(after)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()


def _own_mounts(home: Home, pid: int) -> set[str]:
    """The live worker's own mounts: its run tmpfs and its warm pool's slots."""
    return {m for m in home.mounts()
            if Path(m).parent.name.startswith(f"{pid}-") or Path(m).name.startswith(f"{pid}-")}


def _own_sandboxes(pid: int) -> set[int]:
    """Pre-spawned sandboxes of the live worker: its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def test_a_new_process_never_sweeps_a_live_one(home: Home, tmp_path: Path) -> None:
    """A worker starting beside a live one leaves its pool, run dirs and workspaces alone."""
    run_id = home.submit(_plan(tmp_path, "live", 4))
    live = home.start("worker", "--concurrency", "2")
    try:
        wait_for("the live worker runs the slow step with a warm pool",
                 lambda: _running_everywhere(home, [live], [run_id]))
        held = home.mounts()
        for _ in range(3):  # each new process sweeps at start
            other = home.start("worker", "--concurrency", "1")
            time.sleep(1.0)
            stop(other)
            assert held <= home.mounts() | _gone_sessions(home, run_id)
        wait_for("the run finishes", lambda: status_of(home, run_id) != "RUNNING")
        assert status_of(home, run_id) == "SUCCEEDED"
        slow = [s for s in home.show(run_id)["steps"] if s["step_id"] == "slow"]
        assert [s["attempt"] for s in slow] == [1] and slow[0]["stdout"] == "kept\n"
    finally:
        stop(live)


def _gone_sessions(home: Home, run_id: str) -> set[str]:
    """A finished run's workspace is released (unmounted) by design, not swept."""
    if status_of(home, run_id) == "RUNNING":
        return set()
    return {str(home.sandbox_dir / "workspaces" / f"run-{run_id}")}


async def test_a_finished_task_run_releases_its_workspace_and_image(db, settings) -> None:  # type: ignore[no-untyped-def]
    """An agent (task) run frees its workspace and disk image when it ends, like a plan run."""
    import asyncio

    from onebox.objects.registry import get_object_store
    from onebox.runtime.agent.runs import submit_task
    from onebox.runtime.engine.worker import Worker
    from onebox.sandbox.registry import get_backend
    from onebox.testing import ScriptedModel

    intent = {"goal": "write a file", "entities": [], "capabilities": ["python"],
              "formats": [], "risks": [], "fallbacks": []}
    plan = {"name": "p", "steps": [
        {"id": "w", "tool": "python", "code": "open('a.txt','w').write('x'); print('ok')"},
        {"id": "answer", "kind": "final", "depends_on": ["w"], "input": {"answer": "done"}}]}
    settings.runtime.poll_s, settings.runtime.heartbeat_s = 0.1, 0.2
    backend = get_backend(settings)
    try:
        run_id, _ = await submit_task(db, "write a file")
        worker = Worker(db, backend, settings, run_id=run_id, model=ScriptedModel([intent, plan]),
                        objects=get_object_store(settings))
        await asyncio.wait_for(worker.serve(asyncio.Event()), 90)
        row = await db.fetchone("SELECT status FROM onebox.runs WHERE id = %s", (run_id,))
        assert row is not None and row["status"] == "SUCCEEDED"
        workspace = backend.workspace(f"run-{run_id}")
        images = settings.sandbox_dir / "images"
        assert not workspace.exists(), "the task run's workspace was left behind"
        assert not images.joinpath(f"workspaces-run-{run_id}.img").exists()
    finally:
        await backend.close()


def _markers(home: Home) -> set[int]:
    """The uid markers of this home's session uids (machine-wide registry)."""
    registry = load_settings(home=home.path).sandbox.uid_registry
    names = os.listdir(registry) if registry.is_dir() else []
    return {int(n) for n in names if n.isdigit() and int(n) in home.uids}


def _workspace_mounts(home: Home) -> set[str]:
    """Mounted workspace images (as root each workspace is a loop-mounted image)."""
    prefix = str(load_settings(home=home.path).workspaces_dir) + "/"
    points = (line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())
    return {p for p in points if p.startswith(prefix)}


def _active_sessions(home: Home) -> set[str]:
    import psycopg

    url = home.run("db", "url").stdout.strip()
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT id FROM onebox.sessions WHERE status = 'ACTIVE'").fetchall()
    return {str(r[0]) for r in rows}


def test_a_killed_in_process_exec_leaves_nothing_once_reclaimed(home: Home) -> None:
    """kill -9 an in-process `onebox exec` mid-call: its session (mounted image, uid marker,
    ACTIVE row) is reclaimed by the next process that sweeps (here the next exec), and a
    live exec's session never is."""
    warm = home.run("exec", "--", "print('warm')")  # the database, templates, the registry
    assert warm.returncode == 0, warm.stderr
    base_mounts, base_entries = home.mounts(), home.entries()
    assert not _markers(home) and not _active_sessions(home) and not _workspace_mounts(home)
    doomed = subprocess.Popen(
        [ONEBOX, "exec", "--", "import time; print('started', flush=True); time.sleep(300)"],
        env=home.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert doomed.stdout is not None and doomed.stdout.readline() == "started\n"
        held = (_workspace_mounts(home), _markers(home), _active_sessions(home))
        assert all(held), held  # the probe's precondition: the session holds all three
        beside = home.run("exec", "--", "print(1)")  # sweeps at start: the live one stays
        assert beside.returncode == 0, beside.stderr
        assert (_workspace_mounts(home), _markers(home), _active_sessions(home)) == held
    finally:
        doomed.kill()
        doomed.wait(30)
    after = home.run("exec", "--", "print(2)")
    assert after.returncode == 0, after.stderr
    assert home.mounts() <= base_mounts, home.mounts() - base_mounts
    assert not _workspace_mounts(home) and not _markers(home) and not _active_sessions(home)
    assert not os.listdir(load_settings(home=home.path).workspaces_dir)
    assert home.entries() <= base_entries, home.entries() - base_entries
