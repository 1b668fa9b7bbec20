"""The foreground CLI as a user drives it: Ctrl-C, approvals, whole ids and id prefixes.

Every test runs `onebox` as a subprocess on a fresh ONEBOX_HOME with the embedded database.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
ONEBOX = str(Path(sys.executable).with_name("onebox"))

LONG_PLAN = "steps:\n  - id: nap\n    tool: bash\n    code: sleep 300\n    limits: {timeout_s: 600}\n"
GATED_PLAN = ("steps:\n  - id: prepare\n    tool: bash\n    code: echo draft\n"
              "  - id: gate\n    kind: approval\n    input: {prompt: 'ship it?'}\n"
              "    depends_on: [prepare]\n"
              "  - id: ship\n    tool: bash\n    code: echo shipped\n    depends_on: [gate]\n")
ECHO_PLAN = "steps:\n  - id: hello\n    tool: bash\n    code: echo hello > out.txt; cat out.txt\n"


@pytest.fixture(scope="module")
def home(unmount_below: Callable[[Path], None]) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-cli-int-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=_env(path), capture_output=True, timeout=60)
    unmount_below(path)  # a CLI left at once by a second Ctrl-C keeps its workspace mounted
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "ONEBOX_DATABASE_URL")}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160", **extra}


def onebox(home: Path, *args: str, columns: int = 160) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ONEBOX, *args], env=_env(home, COLUMNS=str(columns)),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


class Foreground:
    """A foreground `onebox run` whose merged output is read line by line as it comes."""

    def __init__(self, home: Path, plan: Path, **env: str) -> None:
        self.proc = subprocess.Popen([ONEBOX, "run", str(plan)], env=_env(home, **env), cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, text: str, within_s: float) -> str:
        """The first line containing ``text``; fails when none came within ``within_s``."""
        deadline = time.monotonic() + within_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break  # the command ended without printing it
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {within_s} s; got {self.seen}")

    def output(self) -> str:
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "".join(self.seen)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _started_run(fg: Foreground) -> str:
    line = fg.wait_for(" started", within_s=120)
    return next(w for w in line.split() if _is_uuid(w))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _status(home: Path, run_id: str) -> dict:
    shown = onebox(home, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def _wait_step(home: Path, run_id: str, status: str) -> None:
    for _ in range(240):
        if any(s["status"] == status for s in _status(home, run_id)["steps"]):
            return
        time.sleep(0.5)
    raise AssertionError(f"no step of run {run_id} became {status}")


def _plan(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


def test_first_ctrl_c_cancels_the_run_and_says_so(home: Path, tmp_path: Path) -> None:
    fg = Foreground(home, _plan(tmp_path, LONG_PLAN))
    try:
        run_id = _started_run(fg)
        _wait_step(home, run_id, "RUNNING")
        fg.proc.send_signal(signal.SIGINT)
        line = fg.wait_for("cancelled", within_s=5)
        assert f"cancelling run {run_id}" in line
        assert fg.proc.wait(timeout=60) == 130
    finally:
        fg.kill()
    assert "Traceback" not in fg.output()
    timeline = _status(home, run_id)
    assert timeline["run"]["status"] == "CANCELLED"
    assert [s["status"] for s in timeline["steps"]] == ["FAILED"]  # the sleep was stopped


def test_second_ctrl_c_leaves_at_once_with_how_to_follow(home: Path, tmp_path: Path) -> None:
    # a worker that only looks at its leases every minute: the first Ctrl-C cannot end the
    # run on its own before the second one comes
    slow = {"ONEBOX_RUNTIME__HEARTBEAT_S": "60", "ONEBOX_RUNTIME__LEASE_S": "300"}
    fg = Foreground(home, _plan(tmp_path, LONG_PLAN), **slow)
    try:
        run_id = _started_run(fg)
        _wait_step(home, run_id, "RUNNING")
        fg.proc.send_signal(signal.SIGINT)
        fg.wait_for("cancelling", within_s=5)
        fg.proc.send_signal(signal.SIGINT)
        assert fg.proc.wait(timeout=10) == 130
    finally:
        fg.kill()
    out = fg.output()
    assert f"onebox show {run_id}" in out and "Traceback" not in out
    assert _status(home, run_id)["run"]["status"] == "CANCELLED"


def test_waiting_for_approval_prints_the_approve_command(home: Path, tmp_path: Path) -> None:
    fg = Foreground(home, _plan(tmp_path, GATED_PLAN))
    try:
        run_id = _started_run(fg)
        line = fg.wait_for(f"onebox approve {run_id} gate", within_s=120)
        assert "WAITING" in line
        assert f"onebox approve {run_id} gate --reject" in fg.output()
        shown = onebox(home, "show", run_id)
        assert "WAITING" in shown.stdout
        assert f"onebox approve {run_id} gate" in shown.stdout
        approved = onebox(home, "approve", run_id[:8], "gate")
        assert approved.returncode == 0, approved.stderr
        assert fg.proc.wait(timeout=120) == 0
    finally:
        fg.kill()
    assert "SUCCEEDED" in fg.output()


def test_runs_prints_ids_that_work_as_input_on_a_narrow_terminal(home: Path) -> None:
    """At 80 columns a run is listed by a unique prefix of its id (8 characters or more, so
    name and error keep their room), and that prefix is what `show` takes."""
    onebox(home, "run", "examples/quickstart.yaml", "--detach")
    ids = [r["id"] for r in json.loads(onebox(home, "runs", "--json").stdout)["runs"]]
    listed = onebox(home, "runs", columns=80)
    assert listed.returncode == 0, listed.stderr
    assert ids and all(run_id[:8] in listed.stdout for run_id in ids)
    shown = onebox(home, "show", ids[0][:8], "--json")
    assert shown.returncode == 0 and ids[0] in shown.stdout, shown.stderr


def _db_url(home: Path) -> str:
    url = onebox(home, "db", "url")
    assert url.returncode == 0, url.stderr
    return url.stdout.strip()


def _twin_ids(prefix: str) -> tuple[str, str]:
    return f"{prefix}-0000-4000-8000-000000000001", f"{prefix}-0000-4000-8000-000000000002"


def _copy_run(home: Path, run_id: str, new_ids: tuple[str, str]) -> None:
    """Two more runs copied from ``run_id`` whose ids share their first 8 characters."""
    with psycopg.connect(_db_url(home), autocommit=True) as conn:
        for new in new_ids:
            conn.execute(
                "INSERT INTO onebox.runs SELECT (jsonb_populate_record(NULL::onebox.runs, "
                "to_jsonb(r) || jsonb_build_object('id', %s::text, 'idempotency_key', NULL))).* "
                "FROM onebox.runs r WHERE id = %s", (new, run_id))


def _copy_execution(home: Path, execution_id: str, new_ids: tuple[str, str]) -> None:
    with psycopg.connect(_db_url(home), autocommit=True) as conn:
        for n, new in enumerate(new_ids, start=100):
            conn.execute(
                "INSERT INTO onebox.task_execution SELECT (jsonb_populate_record("
                "NULL::onebox.task_execution, to_jsonb(t) || jsonb_build_object("
                "'id', %s::text, 'attempt', %s::int))).* FROM onebox.task_execution t "
                "WHERE id = %s", (new, n, execution_id))


@pytest.mark.parametrize("command", ["show", "explain"])
def test_run_id_prefixes(home: Path, tmp_path: Path, command: str) -> None:
    ran = onebox(home, "run", str(_plan(tmp_path, ECHO_PLAN)), "--json")
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run"]["id"]

    unique = onebox(home, command, run_id[:8], "--json")
    assert unique.returncode == 0, unique.stderr
    assert run_id in unique.stdout

    twins = _twin_ids("abcd1234" if command == "show" else "abcd5678")
    _copy_run(home, run_id, twins)
    ambiguous = onebox(home, command, twins[0][:10])
    assert ambiguous.returncode == 2, ambiguous.stdout
    assert "ambiguous" in ambiguous.stderr
    assert twins[0] in ambiguous.stderr and twins[1] in ambiguous.stderr
    assert "Traceback" not in ambiguous.stderr

    none = onebox(home, command, "ffffeeee")
    assert none.returncode == 1 and "does not exist" in none.stderr


def test_replay_accepts_an_execution_id_prefix(home: Path, tmp_path: Path) -> None:
    ran = onebox(home, "run", str(_plan(tmp_path, ECHO_PLAN)), "--json")
    assert ran.returncode == 0, ran.stderr
    execution_id = json.loads(ran.stdout)["steps"][0]["id"]

    unique = onebox(home, "replay", execution_id[:8], "--json")
    assert unique.returncode == 0, unique.stdout + unique.stderr
    assert json.loads(unique.stdout)["execution_id"] == execution_id

    twins = _twin_ids("dcba4321")
    _copy_execution(home, execution_id, twins)
    ambiguous = onebox(home, "replay", "dcba4321")
    assert ambiguous.returncode == 2
    assert twins[0] in ambiguous.stderr and twins[1] in ambiguous.stderr

    none = onebox(home, "replay", "eeeeffff")
    assert none.returncode == 1 and "does not exist" in none.stderr
