"""Docs are tests: every plan and every `onebox`/`make` command in README.md and docs/*.md runs.

The rules a doc follows are in doc_examples.py. Each doc runs in its own fresh ONEBOX_HOME (the
embedded database, the real sandbox), through the CLI as a user runs it; its examples run in the
order they appear. Agent examples talk to a ScriptedOpenAIServer with replies scripted below.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from doc_examples import DOC_FILES, ROOT, Block, Command, all_blocks, blocks, commands_of, plan_of
from doc_servers import AGENT_SCRIPTS, PlanServer, script_for

from onebox.testing import ScriptedOpenAIServer

ONEBOX = str(Path(sys.executable).with_name("onebox"))
MAX_SKIPS = 4
WAIT_POLLS = 240  # a hang guard: 0.5 s apart
LONG_RUNNING = {"worker": "started", "up": "API key"}  # command: its line when up
TEST_VALUES = {"OPENAI_API_KEY": "sk-test"}


class DocHome:
    """One doc's ONEBOX_HOME and working directory (plan.yaml and examples/ are there)."""

    def __init__(self, root: Path) -> None:
        self.home, self.cwd = root / "home", root / "cwd"
        self.cwd.mkdir(parents=True)
        (self.cwd / "examples").symlink_to(ROOT / "examples")
        shutil.copy(ROOT / "examples" / "quickstart.yaml", self.cwd / "plan.yaml")
        self.model_url = ""

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        drop = ("DATABASE_URL", "ONEBOX_DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
                "ONEBOX_LLM__MODEL")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update({"ONEBOX_HOME": str(self.home), "COLUMNS": "160"})
        return {**env, **{k: self._mapped(k, v) for k, v in extra.items()}}

    def _mapped(self, name: str, value: str) -> str:
        """A doc's value that names a machine the tests cannot reach, mapped to one they run."""
        if name in ("DATABASE_URL", "ONEBOX_DATABASE_URL"):
            return self.run(["db", "url"], {}).stdout.strip()
        if name == "OPENAI_BASE_URL":
            return self.model_url
        return TEST_VALUES.get(name, value)

    def run(self, argv: list[str], extra: dict[str, str],
            timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ONEBOX, *argv], env=self.env(extra), cwd=self.cwd, text=True,
                              capture_output=True, timeout=timeout_s)


@pytest.fixture
def doc_home(unmount_below: object) -> Iterator[DocHome]:
    root = Path(tempfile.mkdtemp(prefix="onebox-doc-"))
    root.chmod(0o755)
    home = DocHome(root)
    yield home
    home.run(["db", "stop"], {}, timeout_s=60)
    unmount_below(root)  # type: ignore[operator]
    shutil.rmtree(root, ignore_errors=True)


def run_plan(doc_home: DocHome, block: Block, plan: dict[str, object]) -> str | None:
    """Why the plan did not end SUCCEEDED, or None. `doc-test: approve STEP`: the run waits for
    that approval, which the test gives with `onebox approve RUN STEP` as the doc says."""
    approve = block.marker[1] if block.marker and block.marker[0] == "approve" else None
    path = doc_home.cwd / f"plan-{block.line}.json"
    with PlanServer(plan) as served, ScriptedOpenAIServer(script_for(plan)) as model:
        doc_home.model_url = model.base_url
        path.write_text(json.dumps(served.plan))
        env = doc_home.env(served.env(model.base_url))
        proc = subprocess.Popen([ONEBOX, "run", str(path), "--json"], env=env, cwd=doc_home.cwd,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        refused = approve and approve_when_waiting(doc_home, proc, approve)
        stdout, stderr = proc.communicate(timeout=240)
    judged = judge_plan(proc.returncode, stdout, stderr)
    return f"{refused}; {judged}" if refused else judged


def approve_when_waiting(doc_home: DocHome, proc: subprocess.Popen[str],
                         step_id: str) -> str | None:
    for _ in range(WAIT_POLLS):
        if proc.poll() is not None:
            break
        waiting = json.loads(doc_home.run(["runs", "--waiting", "--json"], {}).stdout)["runs"]
        if waiting:
            done = doc_home.run(["approve", waiting[0]["id"], step_id], {})
            return None if done.returncode == 0 else f"approve failed: {done.stderr[-2000:]}"
        time.sleep(0.5)
    return f"the run never waited for the approval of {step_id}"


def judge_plan(exit_code: int, stdout: str, stderr: str) -> str | None:
    if "Traceback" in stderr:
        return f"a traceback:\n{stderr[-3000:]}"
    try:
        result = json.loads(stdout)
    except json.JSONDecodeError:
        return f"exit {exit_code}, no JSON result:\n{stderr[-3000:]}"
    status = result["run"]["status"]
    failed = [{k: s.get(k) for k in ("step_id", "status", "stderr", "error")}
              for s in result["steps"] if s["status"] != "SUCCESS"]
    return None if status == "SUCCEEDED" and exit_code == 0 else \
        f"ended {status} (exit {exit_code}): {json.dumps(failed)[:3000]}"


def run_command(doc_home: DocHome, command: Command) -> str | None:
    argv = command.argv
    if command.is_synopsis:
        return check_synopsis(doc_home, argv)
    if argv[0] == "make":
        return "`make` cannot run inside the test suite: mark the block `doc-test: skip (...)`"
    ready = LONG_RUNNING.get(argv[1]) if len(argv) > 1 else None
    if ready:
        return run_long(doc_home, command, ready)
    scripted = AGENT_SCRIPTS.get(argv[2]) if argv[1:2] == ["run"] and len(argv) > 2 else None
    with ScriptedOpenAIServer(scripted or []) as model:
        doc_home.model_url = model.base_url
        done = doc_home.run(argv[1:], command.env)
    if done.returncode != 0 or "Traceback" in done.stderr:
        return f"exit {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return None


def check_synopsis(doc_home: DocHome, argv: list[str]) -> str | None:
    """The command exists and accepts every option the synopsis names."""
    words = [w.strip("[]") for w in argv[1:] if w not in ("|", "...")]
    path = []
    for word in words:
        if word.startswith("-") or not word.islower() or not word.isidentifier():
            break
        path.append(word)
    while path:
        helped = doc_home.run([*path, "--help"], {}, timeout_s=60)
        if helped.returncode == 0:
            break
        path.pop()
    missing = [w for w in words if w.startswith("--") and w not in helped.stdout]
    if not path or missing:
        return f"`onebox {' '.join(path)}` does not accept {missing or words}"
    return None


def run_long(doc_home: DocHome, command: Command, ready: str) -> str | None:
    """A command that serves until stopped: it must come up (the API answers /readyz), then
    stop on Ctrl-C without a traceback (exit 0, or 130 after "error: interrupted")."""
    port = free_port()
    env = doc_home.env({**command.env, "ONEBOX_API__PORT": str(port)})  # never the shared 8420
    proc = subprocess.Popen([ONEBOX, *command.argv[1:]], env=env, cwd=doc_home.cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if ready in line:
            wait_until_serving(port if command.argv[1] == "up" else None)
            proc.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops it
    proc.wait(timeout=60)
    output = "".join(seen)
    if proc.returncode not in (0, 130) or "Traceback" in output or ready not in output:
        return f"exit {proc.returncode}:\n{output[-3000:]}"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_serving(port: int | None) -> None:
    for _ in range(WAIT_POLLS if port else 0):
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                return
        time.sleep(0.5)


def runnable(block: Block) -> bool:
    return not (block.marker and block.marker[0] == "skip")


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: p.name)
def test_every_example_of_the_doc_runs(doc: Path, doc_home: DocHome) -> None:
    failures = []
    for block in filter(runnable, blocks(doc)):
        plan = plan_of(block)
        if plan is not None:
            failure = run_plan(doc_home, block, plan)
            failures += [f"{block.doc}:{block.line}: plan {plan.get('name')}: {failure}"] * bool(
                failure)
        for command in commands_of(block):
            failure = run_command(doc_home, command)
            failures += [f"{command.where()}\n{failure}"] * bool(failure)
    assert not failures, "\n\n".join(failures)


def test_skipped_examples_stay_few_and_say_why() -> None:
    skips = [b for b in all_blocks() if b.marker and b.marker[0] == "skip"]
    assert all(b.marker and b.marker[1].startswith("(") for b in skips), skips
    assert len(skips) <= MAX_SKIPS, [f"{b.doc}:{b.line} {b.marker}" for b in skips]


def test_the_docs_hold_plans_and_commands() -> None:
    """The extraction finds what the docs show (a regex that matched nothing would pass)."""
    found = all_blocks()
    names = {str(plan.get("name")) for b in found if (plan := plan_of(b)) is not None}
    assert {"hello", "sales-report"} <= names
    assert len([c for b in found for c in commands_of(b)]) >= 30
