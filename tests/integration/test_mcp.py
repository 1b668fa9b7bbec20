"""`onebox mcp` as an MCP client uses it: the official `mcp` client over stdio (spawning the
command) and over streamable HTTP, against a real database and the real sandbox."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from onebox.config import Settings

ONEBOX = str(Path(sys.executable).with_name("onebox"))
TOOLS = {"execute_code", "create_session", "close_session", "run_task", "run_plan", "get_run",
         "wait_run", "run_files", "read_run_file", "search_knowledge", "remember", "recall",
         "fork_run", "replay_run", "diff_runs"}


def _env(settings: Settings, db_url: str) -> dict[str, str]:
    return {**os.environ, "ONEBOX_HOME": str(settings.home), "DATABASE_URL": db_url,
            "ONEBOX_LOG_LEVEL": "ERROR", "ONEBOX_RUNTIME__POLL_S": "0.05"}


@asynccontextmanager
async def stdio(settings: Settings, db_url: str, log_level: str = "ERROR",
                ) -> AsyncIterator[Client]:
    env = {**_env(settings, db_url), "ONEBOX_LOG_LEVEL": log_level}
    params = StdioServerParameters(command=ONEBOX, args=["mcp"], env=env)
    async with Client(params, read_timeout_seconds=120) as client:
        yield client


def payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content or json.loads(result.content[0].text)
    return data


def error_of(result: Any) -> str:
    assert result.is_error, result
    return str(result.content[0].text)


async def test_stdio_tools_code_plans_and_errors(settings: Settings, db_url: str) -> None:
    async with stdio(settings, db_url, log_level="DEBUG") as client:  # logs never touch stdout
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        assert "session_id" in tools["execute_code"].input_schema["properties"]
        assert tools["execute_code"].description

        ran = payload(await client.call_tool("execute_code", {"code": "print(6 * 7)"}))
        assert ran["stdout"].strip() == "42" and ran["ok"] and ran["session_id"] is None

        session = payload(await client.call_tool("create_session", {}))["session_id"]
        await client.call_tool("execute_code", {"session_id": session, "code": "x = 41"})
        kept = payload(await client.call_tool("execute_code", {"session_id": session,
                                                               "code": "x + 1"}))
        assert kept["value"] == "42" and kept["execution_count"] == 2
        raised = payload(await client.call_tool("execute_code", {"session_id": session,
                                                                 "code": "1 / 0"}))
        assert raised["error"]["name"] == "ZeroDivisionError" and not raised["ok"]
        await client.call_tool("execute_code", {"session_id": session, "language": "bash",
                                                "code": "echo kept > note.txt"})
        again = payload(await client.call_tool("execute_code", {
            "session_id": session, "code": "print(open('note.txt').read().strip())"}))
        assert again["stdout"].strip() == "kept"
        assert payload(await client.call_tool("close_session", {"session_id": session}))["closed"]

        failed = payload(await client.call_tool("execute_code", {"code": "exit 3",
                                                                 "language": "bash"}))
        assert failed["exit_code"] == 3  # the code's failure is data, not a tool error

        plan = ("steps:\n  - id: hello\n    tool: bash\n"
                "    code: echo mcp-plan-ok; printf '# report' > report.md\n")
        run_id = payload(await client.call_tool("run_plan", {"yaml": plan}))["run_id"]
        seen: list[str | None] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(message)

        done = payload(await client.call_tool("wait_run", {"run_id": run_id, "timeout_s": 120},
                                              progress_callback=on_progress))
        assert seen and all(m and m.startswith(f"run {run_id}: ") for m in seen)
        assert done["status"] == "SUCCEEDED" and done["finished"]
        assert "mcp-plan-ok" in done["steps"][0]["stdout"]
        assert payload(await client.call_tool("get_run", {"run_id": run_id}))["status"] == \
            "SUCCEEDED"
        kept = payload(await client.call_tool("run_files", {"run_id": run_id}))["files"]
        assert [f["path"] for f in kept] == ["report.md"]
        read = payload(await client.call_tool("read_run_file", {"run_id": run_id,
                                                                "path": "report.md"}))
        assert read["content"] == "# report" and read["encoding"] == "utf-8"

        replayed = payload(await client.call_tool("replay_run", {"run_id": run_id}))
        assert (replayed["matches"], replayed["model_calls"]) == (1, 0)
        forked = payload(await client.call_tool("fork_run", {
            "run_id": run_id, "at": "hello", "set": {"hello.code": "echo forked"}}))
        child = payload(await client.call_tool("wait_run", {"run_id": forked["run_id"]}))
        assert "forked" in child["steps"][0]["stdout"]
        differ = payload(await client.call_tool("diff_runs", {"run_a": run_id,
                                                              "run_b": forked["run_id"]}))
        assert differ["first_difference"] == "hello" and "+forked" in str(differ["steps"])

        no_llm = error_of(await client.call_tool("run_task", {"task": "sum 1 and 2"}))
        assert "llm_not_configured (field: task)" in no_llm and "ONEBOX_LLM__MODEL" in no_llm

        bad_plan = error_of(await client.call_tool("run_plan", {"yaml": "steps: 3"}))
        assert "steps" in bad_plan and "Traceback" not in bad_plan
        no_run = error_of(await client.call_tool("get_run", {"run_id": "not-a-run"}))
        assert "run_id" in no_run and "Traceback" not in no_run
        bad_session = error_of(await client.call_tool("execute_code", {
            "code": "print(1)", "session_id": "api-0000000000000000"}))
        assert "session_id" in bad_session and "does not exist" in bad_session
        bad_type = error_of(await client.call_tool("execute_code", {"code": "1",
                                                                    "language": "cobol"}))
        assert "language" in bad_type


async def test_stdio_remember_then_recall(settings: Settings, db_url: str) -> None:
    async with stdio(settings, db_url) as client:
        made = payload(await client.call_tool("remember", {
            "text": "The staging database lives on host db-staging-7", "scope": "ops"}))
        assert made["scope"] == "ops" and not made["deduplicated"]
        hits = payload(await client.call_tool("recall", {"query": "where is the staging "
                                                          "database", "scope": "ops"}))
        assert [m["content"] for m in hits["memories"]][:1] == [
            "The staging database lives on host db-staging-7"]
        empty = error_of(await client.call_tool("remember", {"text": "  ", "scope": "ops"}))
        assert "text" in empty


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _key(env: dict[str, str], tenant: str) -> str:
    made = subprocess.run([ONEBOX, "keys", "create", "--tenant", tenant, "--name", tenant,
                           "--json"], env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    return str(json.loads(made.stdout)["key"])


@pytest.fixture
def mcp_http(settings: Settings, db_url: str) -> Iterator[tuple[str, str, str]]:
    """`onebox mcp --http` with API keys on; (url, a key of tenant acme, one of tenant zed)."""
    env = _env(settings, db_url)
    acme, zed = _key(env, "acme"), _key(env, "zed")
    port = _free_port()
    proc = subprocess.Popen([ONEBOX, "mcp", "--http", "--port", str(port), "--no-worker"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        _wait_listening(port, proc)
        yield url, acme, zed
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # SIGTERM is a clean stop


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, \
                proc.stderr and proc.stderr.read()
            time.sleep(0.1)


@asynccontextmanager
async def http_client(url: str, key: str) -> AsyncIterator[Client]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                  timeout=120) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        yield client


async def test_http_needs_a_key_and_acts_as_its_tenant(
    mcp_http: tuple[str, str, str],
) -> None:
    url, acme, zed = mcp_http
    for headers in ({}, {"Authorization": "Bearer obx_not-a-key"}):
        refused = httpx.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1,
                                                         "method": "tools/list"})
        assert refused.status_code == 401 and "authorization" in refused.text
    async with http_client(url, acme) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        ran = payload(await client.call_tool("execute_code", {"code": "print('over http')"}))
        assert ran["stdout"].strip() == "over http"
        session = payload(await client.call_tool("create_session", {}))["session_id"]
        await client.call_tool("execute_code", {"session_id": session,
                                                "code": "open('f', 'w').write('acme')"})
    async with http_client(url, zed) as other:
        foreign = error_of(await other.call_tool("execute_code", {
            "session_id": session, "code": "print(open('f').read())"}))
        assert "does not exist" in foreign and "session_id" in foreign
    async with http_client(url, acme) as client:
        assert payload(await client.call_tool("close_session", {"session_id": session}))["closed"]


def test_http_refuses_the_network_without_keys(settings: Settings) -> None:
    env = {**os.environ, "ONEBOX_HOME": str(settings.home)}
    proc = subprocess.run([ONEBOX, "mcp", "--http", "--host", "0.0.0.0", "--no-auth"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "refusing to serve MCP on 0.0.0.0 without API keys" in proc.stderr
