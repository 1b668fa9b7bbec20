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


SUM_INTENT = {**INTENT, "goal": "sum", "capabilities": ["python"]}
SUM_PLAN = {"steps": [
    {"id": "make", "tool": "python", "code": "print('making numbers')\n"
                                             "open('n.txt', 'w').write('1 2 3')"},
    {"id": "add", "tool": "python", "depends_on": ["make"],
     "code": "print(sum(map(int, open('n.txt').read().split())))"},
    {"id": "done", "kind": "final", "depends_on": ["add"],
     "input": {"answer": "the sum is {{ add.stdout }}"}},
]}
BAD_CODE = {"code": "import sys\nraise ValueError('no numbers here')"}
FAILING_PLAN = {"steps": [
    {"id": "make", "tool": "python", "goal": "make some numbers"},
    {"id": "done", "kind": "final", "depends_on": ["make"], "input": {"answer": "{{ make.stdout }}"}},
]}


def run_task(home: Path, script: list[ServerReply], *args: str) -> subprocess.CompletedProcess[str]:
    with ScriptedOpenAIServer(script) as server:
        env = env_for(home, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test",
                      ONEBOX_LLM__MODEL="scripted-1")
        return subprocess.run([ONEBOX, "run", "sum some numbers", *args], env=env,
                              capture_output=True, text=True, timeout=180)


def run_id_of(stdout: str) -> str:
    return stdout.split()[1]  # "run <id> started: ..."


def test_a_task_prints_its_steps_and_the_answer_not_the_model_replies(home: Path) -> None:
    done = run_task(home, [ServerReply.json(SUM_INTENT), ServerReply.json(SUM_PLAN)])
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "the sum is 6" in out
    for step in ("make", "add"):
        assert f"step {step} (try 1, python): running" in out, out
        assert f"step {step} (try 1): success" in out, out
    assert out.index("step add (try 1): success") < out.index("the sum is 6")
    for internal in ('"goal"', '"steps"', "model:intent", "model:plan", "lookup", '"tools"'):
        assert internal not in out, out  # the model's raw replies are behind --verbose
    assert len(out.splitlines()) <= 15, out  # main printed 36 lines for this task


def test_verbose_shows_the_model_replies_and_the_sql(home: Path) -> None:
    done = run_task(home, [ServerReply.json(SUM_INTENT), ServerReply.json(SUM_PLAN)],
                    "--verbose")
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"goal": "sum"' in done.stdout and "model:plan" in done.stdout
    assert "The same rows in SQL" in done.stdout and "the sum is 6" in done.stdout


def test_a_failed_task_prints_its_traceback_once_and_the_timeline_is_in_time_order(
        home: Path) -> None:
    script = [ServerReply.json(SUM_INTENT), ServerReply.json(FAILING_PLAN),
              *[ServerReply.json(BAD_CODE)] * 4, *[ServerReply.text("no plan")] * 9]
    done = run_task(home, script)
    assert done.returncode == 1, done.stderr[-3000:]
    out = done.stdout
    assert out.count("ValueError: no numbers here") == 1, out  # three tries, one traceback
    assert "step make (try 3): failed" in out and "FAILED" in out
    assert '"code"' not in out and "fix_code" not in out, out
    run_id = run_id_of(out)
    env = env_for(home)
    shown = subprocess.run([ONEBOX, "show", run_id], env=env, capture_output=True, text=True,
                           timeout=60)
    assert shown.stdout.count("ValueError: no numbers here") == 1, shown.stdout
    assert "(x3)" in shown.stdout, shown.stdout  # the identical tracebacks, collapsed
    rows = json.loads(subprocess.run([ONEBOX, "show", run_id, "--json"], env=env,
                                     capture_output=True, text=True, timeout=60).stdout)["steps"]
    make = [r["step_id"].split("#")[0] for r in rows if r["step_number"] == 1]
    assert make == ["model:write_code:make", "make", "model:fix_code:make", "make",
                    "model:fix_code:make", "make"], make
