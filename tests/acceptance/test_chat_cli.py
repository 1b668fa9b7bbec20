"""`onebox chat` and the profile's thread flags as a user runs them: the CLI a subprocess with
its messages piped on stdin (chat's plain, non-terminal mode), the model a scripted
OpenAI-compatible server on 127.0.0.1, the embedded database, the real sandbox."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onebox.testing import ScriptedOpenAIServer, ServerReply

ONEBOX = str(Path(sys.executable).with_name("onebox"))
MISSING = "00000000-0000-4000-8000-000000000000"


def intent(goal: str) -> ServerReply:
    return ServerReply.json({"goal": goal, "entities": [], "capabilities": ["bash"],
                             "formats": [], "risks": [], "fallbacks": []})


def plan(code: str, answer: str) -> ServerReply:
    return ServerReply.json({"steps": [
        {"id": "work", "tool": "bash", "code": code},
        {"id": "done", "kind": "final", "depends_on": ["work"], "input": {"answer": answer}}]})


def upkeep(fact: str, summary: str) -> list[ServerReply]:
    return [ServerReply.json({"facts": [fact]}), ServerReply.json({"summary": summary})]


SAVE = [intent("keep the code"),
        plan("echo writing the note; echo 4417 > notes.txt", "I saved it in notes.txt"),
        *upkeep("The launch code 4417 is in notes.txt.", "The user keeps a code in notes.txt.")]
READ = [intent("recall the code"), plan("cat notes.txt", "the code is {{ work.stdout }}"),
        *upkeep("The user asked for the code again.", "The code was read back.")]


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-chat-cli-"))
    path.chmod(0o755)
    yield path
    subprocess.run([ONEBOX, "db", "stop"], env=env_for(path), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as scripted:
        yield scripted


def env_for(home: Path, server: ScriptedOpenAIServer | None = None) -> dict[str, str]:
    drop = ("DATABASE_URL", "ONEBOX_DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
            "ONEBOX_LLM__MODEL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    model = {} if server is None else {"OPENAI_BASE_URL": server.base_url,
                                       "OPENAI_API_KEY": "sk-test",
                                       "ONEBOX_LLM__MODEL": "scripted-1"}
    return {**env, "ONEBOX_HOME": str(home), "COLUMNS": "160", "ONEBOX_RUNTIME__POLL_S": "0.1",
            "ONEBOX_RUNTIME__HEARTBEAT_S": "0.2", **model}


def onebox(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    with subprocess.Popen([ONEBOX, *args], env=env, stdin=subprocess.PIPE, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            out, err = proc.communicate(stdin, timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"onebox {' '.join(args)} hung:\n{out[-3000:]}\n{err[-3000:]}"
                                 ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def thread_of(stdout: str) -> str:
    found = re.search(r"thread ([0-9a-f-]{36}) \(turn", stdout)
    assert found, stdout
    return found.group(1)


def request_with(server: ScriptedOpenAIServer, text: str) -> str:
    """The first model request (as JSON text) whose messages contain ``text``."""
    for body in server.requests:
        dumped = json.dumps(body["messages"])
        if text in dumped:
            return dumped
    raise AssertionError(f"no model request mentions {text!r}")


def shown(env: dict[str, str], thread_id: str) -> dict[str, Any]:
    done = onebox(env, "thread", "show", thread_id, "--json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_two_turns_recall_the_first_ones_file_and_the_thread_resumes(
        home: Path, server: ScriptedOpenAIServer) -> None:
    env = env_for(home, server)
    created = onebox(env, "profile", "create", "brief", "--model", "scripted-1",
                     "--context-tokens", "1500",
                     "--context-turns", "1")
    assert created.returncode == 0, created.stderr
    server.add(*SAVE, *READ)
    chat = onebox(env, "chat", "--profile", "brief",
                  stdin="keep my launch code 4417 in a file\nwhat was my launch code?\n")
    assert chat.returncode == 0, chat.stderr[-3000:]
    out = chat.stdout
    assert "step work (try 1, bash): running" in out  # the steps and their output, live
    assert out.index("writing the note") < out.index("I saved it in notes.txt") \
        < out.index("the code is 4417")
    assert "notes.txt" in request_with(server, "what was my launch code?")  # turn 1's file
    thread_id = thread_of(out)

    server.add(*READ)
    resumed = onebox(env, "chat", "--thread", thread_id[:8], stdin="and once more?\n")
    assert resumed.returncode == 0, resumed.stderr[-3000:]  # a prefix, as `thread list` prints
    assert f"thread {thread_id} (turn 2)" in resumed.stdout
    assert "the code is 4417" in resumed.stdout  # the same workspace, a later process
    assert "code was read back" in request_with(server, "and once more?")  # the summary
    turns = shown(env, thread_id)["turns"]
    assert [t["status"] for t in turns] == ["SUCCEEDED"] * 3
    assert {t["context"]["budget_tokens"] for t in turns} == {1500}  # the profile's budget


@pytest.mark.parametrize(("args", "code", "words"), [
    (["--thread", "not-a-thread"], 2, ["--thread", "is not a thread id"]),
    (["--thread", MISSING], 1, ["--thread", MISSING, "does not exist"]),
    (["--profile", "nope"], 1, ["--profile", "'nope' does not exist"]),
    (["--thread", MISSING, "--profile", "p"], 2, ["--profile", "--thread"]),
])
def test_bad_flags_say_which_flag_and_why(home: Path, server: ScriptedOpenAIServer,
                                          args: list[str], code: int,
                                          words: list[str]) -> None:
    done = onebox(env_for(home, server), "chat", *args, stdin="hello\n")
    assert done.returncode == code, done.stderr
    for word in words:
        assert word in done.stderr
    assert "Traceback" not in done.stderr and "you>" not in done.stdout


@pytest.mark.parametrize(("flag", "value", "field"), [
    ("--context-tokens", "50", "context_tokens"),
    ("--context-tokens", "many", None),
    ("--context-turns", "51", "context_turns"),
    ("--context-turns", "-1", "context_turns"),
    ("--context-memory-share", "0.95", "context_memory_share"),
])
def test_profile_thread_flags_are_validated(home: Path, flag: str, value: str,
                                            field: str | None) -> None:
    done = onebox(env_for(home), "profile", "create", "bad", "--model", "m", flag, value)
    assert done.returncode == 2, done.stderr
    assert flag in done.stderr and "Traceback" not in done.stderr
    if field is not None:
        assert field in done.stderr


def test_profile_show_has_the_thread_settings(home: Path) -> None:
    env = env_for(home)
    created = onebox(env, "profile", "create", "wide", "--model", "m", "--context-tokens",
                     "9000", "--context-turns", "0", "--context-memory-share", "0.3")
    assert created.returncode == 0, created.stderr
    show = onebox(env, "profile", "show", "wide").stdout
    assert "context_tokens: 9000" in show and "context_turns: 0" in show
    spec = json.loads(onebox(env, "profile", "show", "wide", "--json").stdout)["spec"]
    assert (spec["context_tokens"], spec["context_turns"]) == (9000, 0)
    assert "context_memory_share: 0.3" in show and spec["context_memory_share"] == 0.3
    assert onebox(env, "profile", "create", "plain", "--model", "m").returncode == 0
    show = onebox(env, "profile", "show", "plain").stdout
    assert "context_tokens: 4000 (default)" in show and "context_turns: 4 (default)" in show
    assert "context_memory_share: 0.45 (default)" in show


def test_ctrl_c_after_the_answer_leaves_the_upkeep_and_the_next_chat_finishes_it(
        home: Path, server: ScriptedOpenAIServer) -> None:
    env = env_for(home, server)
    slow_facts = dataclasses.replace(ServerReply.json({"facts": ["A slow fact."]}), delay_s=6)
    server.add(intent("note it"), plan("echo noted", "noted, first"), slow_facts)
    with subprocess.Popen([ONEBOX, "chat"], env=env, stdin=subprocess.PIPE, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("note this down\n")
        proc.stdin.close()
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while "noted, first" not in "".join(lines) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "noted, first" in "".join(lines), "".join(lines)[-3000:]
        time.sleep(0.5)  # the upkeep's facts call is in flight (the provider answers slowly,
        # and there is no summary reply: were Ctrl-C missed, the run would wait for one)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        reader.join(timeout=5)
        err = proc.stderr.read() if proc.stderr else ""
    out = "".join(lines)
    assert code == 130, err[-3000:]
    assert "upkeep (its facts, the summary) runs now" in out, out[-3000:]  # answered first
    assert "goes on without this chat" in out and "cancelling" not in out, out[-3000:]
    thread_id = thread_of(out)
    turn = shown(env, thread_id)["turns"][0]
    assert turn["status"] not in ("CANCELLED", "FAILED", "SUCCEEDED"), turn  # left, not cancelled

    server.add(*upkeep("The user noted something.", "A note."), intent("again"),
               plan("echo again", "noted, second"), *upkeep("Again.", "Two notes."))
    resumed = onebox(env, "chat", "--thread", thread_id, stdin="and now?\n")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = resumed.stdout
    assert "turn 1 (run" in out and "finishing it here first" in out
    assert out.index("finishing it here first") < out.index("noted, second")
    turns = shown(env, thread_id)["turns"]
    assert [t["status"] for t in turns] == ["SUCCEEDED", "SUCCEEDED"], turns



def test_a_thread_with_a_profile_continues_without_a_machine_model(
        home: Path, server: ScriptedOpenAIServer) -> None:
    """Also: a facts reply with no list of facts is a one-line note, not a logger warning."""
    env = env_for(home, server)
    created = onebox(env, "profile", "create", "own-model", "--model", "scripted-1")
    assert created.returncode == 0, created.stderr
    env.pop("ONEBOX_LLM__MODEL")  # only the stored profile names a model
    server.add(intent("one"), plan("echo first", "first answer"),
               ServerReply.json({"fact": "not a list"}), ServerReply.json({"summary": "One."}))
    first = onebox(env, "chat", "--profile", "own-model", stdin="first\n")
    assert first.returncode == 0, first.stderr[-3000:]
    for terminal in (first.stdout, first.stderr):  # main: a WARNING line on stderr
        assert "has no list" not in terminal and "WARNING" not in terminal, terminal
    assert "note: the facts of this turn were not saved" in first.stdout, first.stdout
    assert "step model:" not in first.stdout and "lookup#" not in first.stdout  # internals
    assert "upkeep:facts" not in first.stdout and "step work (try 1): success" in first.stdout
    server.add(intent("two"), plan("echo second", "second answer"), *upkeep("Two.", "Two."))
    again = onebox(env, "chat", "--thread", thread_of(first.stdout), stdin="second\n")
    assert again.returncode == 0, again.stderr[-3000:]  # main: exit 2, "set ONEBOX_LLM__MODEL"
    assert "second answer" in again.stdout
