"""`onebox worker` as an operator runs it: picks up detached runs; SIGTERM drains."""

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

import pytest

ONEBOX = str(Path(sys.executable).with_name("onebox"))


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-worker-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=env_for(path), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "ONEBOX_DATABASE_URL")}
    return {**env, "ONEBOX_HOME": str(home)}


def onebox(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ONEBOX, *args], env=env_for(home), capture_output=True, text=True,
                          timeout=120)


def test_sigterm_lets_the_running_step_finish(home: Path, tmp_path: Path) -> None:
    plan = tmp_path / "slow.yaml"
    plan.write_text("steps:\n  - id: slow\n    tool: bash\n    code: sleep 2; echo done\n")
    submitted = onebox(home, "run", str(plan), "--detach", "--json")
    assert submitted.returncode == 0, submitted.stderr
    run_id = json.loads(submitted.stdout)["run_id"]
    worker = subprocess.Popen([ONEBOX, "worker", "--concurrency", "2", "--drain-s", "30"],
                              env=env_for(home), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            steps = json.loads(onebox(home, "show", run_id, "--json").stdout)["steps"]
            if steps and steps[0]["status"] == "RUNNING":
                break
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    assert "SIGTERM drains" in err and "stopped" in err
    shown = json.loads(onebox(home, "show", run_id, "--json").stdout)
    assert shown["run"]["status"] == "SUCCEEDED"
    assert shown["steps"][0]["stdout"] == "done\n" and shown["steps"][0]["attempt"] == 1
