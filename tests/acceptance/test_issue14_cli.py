"""Issue 14's "Done when" through the CLI, as a user runs it (every command a subprocess):
`onebox run "task" --file data.csv`, `onebox logs -f` printing the step live, `onebox
approve`, the answer in `onebox show`, `onebox files --get report.md`, and `onebox retry`
of a failed run. The model is a scripted OpenAI-compatible server on 127.0.0.1; the
database, worker and sandbox are real.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onebox.testing import ScriptedOpenAIServer, ServerReply

ONEBOX = str(Path(sys.executable).with_name("onebox"))
sys.path.insert(0, str(Path(__file__).parents[1] / "api"))
from test_issue14_flow import CSV, FLAKY, INTENT, PLAN  # noqa: E402


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-issue14-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=env_for(path), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


def env_for(home: Path, **extra: str) -> dict[str, str]:
    drop = ("DATABASE_URL", "ONEBOX_DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
            "ONEBOX_LLM__MODEL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160", **extra}


def onebox(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run([ONEBOX, *args], env=env, capture_output=True, text=True,
                          timeout=180, cwd=cwd)
    assert done.returncode == 0, f"onebox {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout


def wait_for(env: dict[str, str], run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        shown: dict[str, Any] = json.loads(onebox(env, "show", run_id, "--json"))
        if shown["run"]["status"] in statuses:
            return shown
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} stayed {shown['run']['status']}")


def test_task_with_a_csv_logs_approve_answer_files_and_retry(home: Path,
                                                             tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_bytes(CSV)
    (tmp_path / "flaky.yaml").write_text(FLAKY)
    with ScriptedOpenAIServer([ServerReply.json(INTENT), ServerReply.json(PLAN)]) as server:
        env = env_for(home, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test",
                      ONEBOX_LLM__MODEL="scripted-1")
        run_id = json.loads(onebox(env, "run", "Summarise the sales in data.csv",
                                   "--file", "data.csv", "--detach", "--json",
                                   cwd=tmp_path))["run_id"]
        worker = subprocess.Popen([ONEBOX, "worker"], env=env, stderr=subprocess.DEVNULL)
        try:
            _walk(env, run_id, tmp_path)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)


def _walk(env: dict[str, str], run_id: str, tmp_path: Path) -> None:
    logs = subprocess.Popen([ONEBOX, "logs", run_id, "-f"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    waiting = wait_for(env, run_id, "WAITING", "FAILED", "DEAD")
    assert waiting["run"]["status"] == "WAITING", waiting["run"]["error"]
    onebox(env, "approve", run_id, "publish", "--comment", "numbers checked")
    shown = wait_for(env, run_id, "SUCCEEDED", "FAILED", "DEAD")
    assert shown["run"]["answer"] == "total: 60\n" or shown["run"]["answer"] == "total: 60"
    assert "total: 60" in onebox(env, "show", run_id)
    out, _ = logs.communicate(timeout=60)
    assert "reading row 3: east" in out and "total: 60" in out, out[-2000:]
    report = onebox(env, "files", run_id, "--get", "report.md")
    assert report == "# Sales report\n\nrows: 3\ntotal: 60\n"

    failed = json.loads(onebox(env, "run", str(tmp_path / "flaky.yaml"), "--detach",
                               "--json"))["run_id"]
    dead = wait_for(env, failed, "DEAD", "FAILED", "SUCCEEDED")
    assert dead["run"]["status"] == "DEAD"
    onebox(env, "retry", failed)
    retried = wait_for(env, failed, "SUCCEEDED", "DEAD", "FAILED")
    assert retried["run"]["status"] == "SUCCEEDED"
    assert [s["stdout"] for s in retried["steps"] if s["attempt"] == 2] == [
        "second try worked\n"]
