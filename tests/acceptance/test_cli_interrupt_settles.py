"""Ctrl-C on a foreground `onebox run` whose step another worker holds (issue 28, point 11e):
the final table shows how every step ended, never a step still RUNNING.

The foreground process cannot call the run's model (its provider's key variable is set only
for a separate `onebox worker`), so that worker holds the model step, answering slowly from a
scripted OpenAI-compatible server, when the user presses Ctrl-C.
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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from onebox.testing import ScriptedOpenAIServer, ServerReply

ONEBOX = str(Path(sys.executable).with_name("onebox"))
INTENT = {"goal": "greet", "entities": [], "capabilities": ["bash"], "formats": [],
          "risks": [], "fallbacks": []}


@pytest.fixture(scope="module")
def home(unmount_below: Callable[[Path], None]) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-cli-settle-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=_env(path), capture_output=True, timeout=60)
    unmount_below(path)
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path, **extra: str) -> dict[str, str]:
    drop = ("DATABASE_URL", "ONEBOX_DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
            "ONEBOX_LLM__MODEL", "I28_SLOW_KEY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160", **extra}


def _show(env: dict[str, str], run_id: str) -> dict:
    shown = subprocess.run([ONEBOX, "show", run_id, "--json"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_ctrl_c_waits_for_a_step_another_worker_holds(home: Path) -> None:
    slow = ServerReply.json(INTENT)
    with ScriptedOpenAIServer([ServerReply(slow.status, slow.body, delay_s=60)]) as llm:
        providers = json.dumps([{"name": "slow", "base_url": llm.base_url,
                                 "api_key_env": "I28_SLOW_KEY"}])
        env = _env(home, ONEBOX_PROVIDERS=providers)
        made = subprocess.run([ONEBOX, "profile", "create", "slowpoke", "--provider", "slow",
                               "--model", "m"], env=env, capture_output=True, text=True,
                              timeout=120)
        assert made.returncode == 0, made.stderr
        worker = subprocess.Popen([ONEBOX, "worker", "--name", "holder"],
                                  env={**env, "I28_SLOW_KEY": "sk-test"},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fg = subprocess.Popen([ONEBOX, "run", "say hi", "--profile", "slowpoke", "--verbose"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert fg.stdout is not None
            started = ""
            while " started" not in started and fg.poll() is None:
                started = fg.stdout.readline()
            run_id = next(w for w in started.split() if w.count("-") == 4)
            for _ in range(600):  # the worker has the model step (its call hangs 60 s)
                if any(s["status"] == "RUNNING" for s in _show(env, run_id)["steps"]):
                    break
                time.sleep(0.2)
            else:
                raise AssertionError("the other worker never started the model step")
            fg.send_signal(signal.SIGINT)
            out, _ = fg.communicate(timeout=120)
        finally:
            for proc in (fg, worker):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)
    assert fg.returncode == 130, out
    table = out[out.index("cancelled by user"):]
    assert "RUNNING" not in table, out
    assert "model:intent#a1" in table and "FAILED" in table, out
    assert "Traceback" not in out
    steps = _show(env, run_id)["steps"]
    assert steps and all(s["status"] in ("SUCCESS", "FAILED", "TIMEOUT", "CANCELLED")
                         for s in steps), steps
