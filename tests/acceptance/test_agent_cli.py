"""`onebox run "<task>"` as a user runs it: the real openai client against a scripted
OpenAI-compatible server on 127.0.0.1, the embedded database, the real sandbox."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from onebox.testing import ScriptedOpenAIServer, ServerReply

ONEBOX = str(Path(sys.executable).with_name("onebox"))
INTENT = {"goal": "greet", "entities": [], "capabilities": ["bash"], "formats": [],
          "risks": [], "fallbacks": []}
PLAN = {"steps": [
    {"id": "hello", "tool": "bash", "code": "echo hello from the sandbox"},
    {"id": "done", "kind": "final", "depends_on": ["hello"],
     "input": {"answer": "{{ hello.stdout }}"}},
]}


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-agent-cli-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=env_for(path), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


def env_for(home: Path, **extra: str) -> dict[str, str]:
    drop = ("DATABASE_URL", "ONEBOX_DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
            "ONEBOX_LLM__MODEL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160", **extra}


def test_task_without_a_model_says_what_to_set(home: Path) -> None:
    run = subprocess.run([ONEBOX, "run", "say hello"], env=env_for(home), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2
    for name in ("ONEBOX_LLM__MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        assert name in run.stderr
    assert "Traceback" not in run.stderr


def test_task_runs_through_an_openai_compatible_endpoint(home: Path) -> None:
    script = [ServerReply.error(429, retry_after=0), ServerReply.json(INTENT),
              ServerReply.json(PLAN)]
    with ScriptedOpenAIServer(script) as server:
        env = env_for(home, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test",
                      ONEBOX_LLM__MODEL="scripted-1")
        run = subprocess.run([ONEBOX, "run", "say hello", "--json"], env=env,
                             capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr[-3000:]
        result = json.loads(run.stdout)
        assert result["run"]["status"] == "SUCCEEDED"
        code = [s for s in result["steps"] if s["tool_name"] not in ("model", "check", "lookup")]
        assert code[0]["stdout"] == "hello from the sandbox\n"
        assert [s["step_id"] for s in result["steps"] if s["tool_name"] == "model"] == [
            "model:intent#a1", "model:plan#a4"]  # model work is a durable step too
        assert len(server.requests) == 3  # the 429 was retried by the client
        assert server.headers[-1].get("authorization") == "Bearer sk-test"
        explained = subprocess.run([ONEBOX, "explain", result["run"]["id"], "--json"], env=env,
                                   capture_output=True, text=True, timeout=60)
    assert explained.returncode == 0, explained.stderr
    kinds = [d["kind"] for d in json.loads(explained.stdout)["decisions"]]
    assert "intent" in kinds and "plan" in kinds and "run" in kinds and "finish" in kinds
