"""The unmodified E2B SDKs (``e2b``, ``e2b-code-interpreter``) against a live onebox API.

Only environment variables point the SDK at onebox: E2B_API_URL, E2B_SANDBOX_URL and
E2B_API_KEY (a onebox key). The SDK is synchronous, as most E2B scripts are; it runs in a
thread while the server runs on the test's event loop.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from api_helpers import Api

T = TypeVar("T")


@pytest.fixture
async def e2b_env(api_no_worker: Api, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Api]:
    monkeypatch.setenv("E2B_API_URL", f"{api_no_worker.url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{api_no_worker.url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", api_no_worker.keys["acme"])
    yield api_no_worker


async def sdk(fn: Callable[[], T]) -> T:
    """Run blocking SDK code off the event loop that serves it."""
    return await asyncio.to_thread(fn)


async def test_lifecycle_create_info_list_timeout_connect_kill(e2b_env: Api) -> None:
    from e2b import Sandbox, SandboxQuery

    def flow() -> dict[str, Any]:
        sbx = Sandbox.create(metadata={"purpose": "e2b-test"}, timeout=120)
        info = sbx.get_info()
        listed = Sandbox.list(query=SandboxQuery(metadata={"purpose": "e2b-test"})).next_items()
        other = Sandbox.list(query=SandboxQuery(metadata={"purpose": "none"})).next_items()
        sbx.set_timeout(600)
        later = sbx.get_info()
        again = Sandbox.connect(sbx.sandbox_id)
        running = again.is_running()
        killed = sbx.kill()
        return {"id": sbx.sandbox_id, "info": info, "listed": [s.sandbox_id for s in listed],
                "other": other, "later": later, "running": running, "killed": killed,
                "after": Sandbox.list().next_items()}

    out = await sdk(flow)
    assert out["id"].startswith("api-")
    assert out["info"].metadata == {"purpose": "e2b-test"}
    assert 110 <= (out["info"].end_at - out["info"].started_at).total_seconds() <= 125
    assert out["listed"] == [out["id"]] and out["other"] == []
    assert (out["later"].end_at - out["info"].end_at).total_seconds() > 400
    assert out["running"] and out["killed"]
    assert out["id"] not in [s.sandbox_id for s in out["after"]]


async def test_list_filters_orders_and_pages_and_connect_never_shortens(e2b_env: Api) -> None:
    from e2b import Sandbox, SandboxQuery
    from e2b.exceptions import SandboxException

    def ids(**kwargs: Any) -> list[str]:
        return [s.sandbox_id for s in Sandbox.list(**kwargs).next_items()]

    def flow() -> dict[str, Any]:
        first = Sandbox.create(metadata={"suite": "list"}, timeout=600)
        second = Sandbox.create("other-template", metadata={"suite": "list"})
        try:
            mine = SandboxQuery(metadata={"suite": "list"})
            started = first.get_info().started_at
            pages = Sandbox.list(query=mine, limit=1)
            paged = [pages.next_items(), pages.has_next, pages.next_items(), pages.has_next]
            end = first.get_info().end_at
            Sandbox.connect(first.sandbox_id, timeout=60)  # E2B: never shortens a running one
            for token in ("2020-01-01T00:00:00|api-0", "not a token"):
                with pytest.raises(SandboxException, match="nextToken"):
                    Sandbox.list(query=mine, next_token=token).next_items()
            return {
                "first": first.sandbox_id, "second": second.sandbox_id, "paged": paged,
                "asc": ids(query=mine, order="asc"), "desc": ids(query=mine, order="desc"),
                "base": ids(query=SandboxQuery(metadata={"suite": "list"}, template="base")),
                "unknown": ids(query=SandboxQuery(template="unknown-template")),
                "after": ids(query=SandboxQuery(metadata={"suite": "list"},
                                                started_after=started + timedelta(seconds=1))),
                "kept": first.get_info().end_at >= end}
        finally:
            first.kill()
            second.kill()

    out = await sdk(flow)
    assert out["asc"] == [out["first"], out["second"]] and out["desc"] == out["asc"][::-1]
    assert [s.sandbox_id for s in out["paged"][0]] == [out["second"]] and out["paged"][1]
    assert [s.sandbox_id for s in out["paged"][2]] == [out["first"]] and not out["paged"][3]
    assert out["base"] == [out["first"]] and out["unknown"] == []
    assert out["first"] not in out["after"]
    assert out["kept"]


async def test_files_write_read_list_remove_make_dir(e2b_env: Api) -> None:
    from e2b import Sandbox
    from e2b.exceptions import InvalidArgumentException, NotFoundException

    def flow() -> dict[str, Any]:
        sbx = Sandbox.create()
        try:
            sbx.files.write("/home/user/notes/a.txt", "hello")
            sbx.files.write("b.bin", b"\x00\x01")
            out: dict[str, Any] = {
                "read": sbx.files.read("/home/user/notes/a.txt"),
                "bytes": bytes(sbx.files.read("b.bin", format="bytes")),
                "made": sbx.files.make_dir("/home/user/empty"),
                "made_again": sbx.files.make_dir("/home/user/empty"),
                "list": sorted((e.name, e.type.value, e.path) for e in sbx.files.list("/home/user")),
                "exists": sbx.files.exists("/home/user/notes/a.txt"),
                "info": sbx.files.get_info("/home/user/notes/a.txt"),
            }
            many = sbx.files.write_files([{"path": "m/1.txt", "data": "one"},
                                          {"path": "/home/user/m/2.txt", "data": b"two"}])
            out["many"] = [(w.path, sbx.files.read(w.path)) for w in many]
            out["fileobj"] = sbx.files.write("obj.txt", io.BytesIO(b"from a file object")).path
            out["stream"] = b"".join(sbx.files.read("obj.txt", format="stream"))
            sbx.files.rename("/home/user/b.bin", "/home/user/notes/c.bin")
            sbx.files.remove("/home/user/notes/a.txt")
            out["after"] = sorted(e.name for e in sbx.files.list("/home/user/notes"))
            out["gone"] = sbx.files.exists("/home/user/notes/a.txt")
            sbx.files.remove("/home/user/notes/a.txt")  # gone already: as envd, no error
            with pytest.raises(NotFoundException):
                sbx.files.read("/home/user/missing.txt")
            with pytest.raises(InvalidArgumentException, match="outside the sandbox's home"):
                sbx.files.read("/etc/passwd")
            return out
        finally:
            sbx.kill()

    out = await sdk(flow)
    assert out["read"] == "hello" and out["bytes"] == b"\x00\x01"
    assert out["made"] is True and out["made_again"] is False
    assert ("notes", "dir", "/home/user/notes") in out["list"]
    assert ("b.bin", "file", "/home/user/b.bin") in out["list"]
    assert out["exists"] and out["info"].size == 5
    assert out["after"] == ["c.bin"] and out["gone"] is False
    assert out["many"] == [("/home/user/m/1.txt", "one"), ("/home/user/m/2.txt", "two")]
    assert out["fileobj"] == "/home/user/obj.txt" and out["stream"] == b"from a file object"


async def test_commands_foreground_streamed_and_background(e2b_env: Api) -> None:
    from e2b import CommandExitException, Sandbox

    def flow() -> dict[str, Any]:
        sbx = Sandbox.create()
        try:
            chunks: list[str] = []
            fg = sbx.commands.run("echo one; echo two >&2; echo three", on_stdout=chunks.append)
            sbx.commands.run("mkdir -p sub && echo here > sub/x")
            live = sbx.commands.run(
                "echo ready; for i in $(seq 400); do [ -e go ] && break; sleep 0.05; done; "
                "[ -e go ] && echo 'go seen'", on_stdout=lambda line: _go(sbx, line))
            cwd = sbx.commands.run("cat x; pwd", cwd="/home/user/sub")
            with pytest.raises(CommandExitException) as failed:
                sbx.commands.run("exit 7")
            bg = sbx.commands.run("echo started; sleep 30", background=True)
            listed = [p.pid for p in sbx.commands.list()]
            killed = bg.kill()
            with pytest.raises(CommandExitException):
                bg.wait()
            quick = sbx.commands.run("echo done", background=True).wait()
            later = sbx.commands.run("echo $GREETING; sleep 1; echo bye", background=True,
                                     envs={"GREETING": "hello"})
            joined = sbx.commands.connect(later.pid).wait()
            return {"fg": fg, "chunks": chunks, "cwd": cwd, "exit": failed.value.exit_code,
                    "live": live, "bg_pid": bg.pid, "listed": listed, "killed": killed,
                    "quick": quick, "joined": joined}
        finally:
            sbx.kill()

    out = await sdk(flow)
    assert out["fg"].stdout == "one\nthree\n" and out["fg"].stderr == "two\n"
    assert out["fg"].exit_code == 0 and "".join(out["chunks"]) == "one\nthree\n"
    assert out["cwd"].stdout.splitlines()[0] == "here"
    assert out["exit"] == 7
    assert out["live"].stdout == "ready\ngo seen\n"  # 'ready' reached the SDK mid-command
    assert out["bg_pid"] in out["listed"] and out["killed"] is True
    assert out["quick"].stdout == "done\n"
    assert out["joined"].exit_code == 0 and out["joined"].stdout.endswith("bye\n")


WAIT_FOR_GO = """
import os, time
print('ready', flush=True)
for _ in range(400):
    if os.path.exists('go'):
        break
    time.sleep(0.05)
print('go seen' if os.path.exists('go') else 'no go')
"""


def _go(sbx: Any, line: str) -> None:
    """Answer a cell's 'ready' while it still runs: only a streamed line can arrive then."""
    if line.startswith("ready"):
        sbx.files.write("/home/user/go", "1")


async def test_run_code_state_streams_errors_and_rich_results(e2b_env: Api) -> None:
    from e2b.exceptions import SandboxException
    from e2b_code_interpreter import Sandbox

    def flow() -> dict[str, Any]:
        sbx = Sandbox.create()
        try:
            first = sbx.run_code("x = 41")
            second = sbx.run_code("x + 1")
            out: list[str] = []
            err: list[str] = []
            printed = sbx.run_code("import sys\nprint('a')\nprint('b', file=sys.stderr)\n"
                                   "print('c')", on_stdout=lambda m: out.append(m.line),
                                   on_stderr=lambda m: err.append(m.line))
            failed = sbx.run_code("def f():\n    return undefined_name\nf()")
            rich = sbx.run_code(
                "class Page:\n    def _repr_html_(self):\n        return '<b>hi</b>'\n"
                "display(Page())\n{'a': 1}")
            sbx.files.write("/home/user/in.txt", "from the SDK")
            live = sbx.run_code(WAIT_FOR_GO, on_stdout=lambda m: _go(sbx, m.line))
            reads = sbx.run_code("open('in.txt').read()")
            envs = sbx.run_code("import os\nos.environ.get('COLOUR')", envs={"COLOUR": "teal"})
            with pytest.raises(SandboxException, match="language 'bash' is not supported"):
                sbx.run_code("echo hi", language="bash")
            return {"first": first, "second": second, "printed": printed, "out": out,
                    "err": err, "failed": failed, "rich": rich, "reads": reads,
                    "live": live, "envs": envs}
        finally:
            sbx.kill()

    out = await sdk(flow)
    assert out["first"].error is None and out["first"].text is None
    assert out["second"].text == "42"
    assert out["second"].execution_count == out["first"].execution_count + 1
    assert "".join(out["printed"].logs.stdout) == "a\nc\n"
    assert "".join(out["printed"].logs.stderr) == "b\n"
    assert "".join(out["out"]) == "a\nc\n" and "".join(out["err"]) == "b\n"
    error = out["failed"].error
    assert error.name == "NameError" and "undefined_name" in error.value
    assert "f()" in error.traceback
    html = [r for r in out["rich"].results if r.html]
    assert html[0].html == "<b>hi</b>" and not html[0].is_main_result
    assert out["rich"].results[-1].is_main_result and out["rich"].text == "{'a': 1}"
    assert out["reads"].text == "from the SDK"  # a string's quotes dropped, as E2B's server does
    assert out["envs"].text == "teal"
    assert out["live"].logs.stdout[-1] == "go seen\n"  # 'ready' reached the SDK mid-cell


async def test_code_contexts_are_refused_with_a_clear_error(e2b_env: Api) -> None:
    """The SDK's context calls send no access token; each still gets the documented answer."""
    from e2b.exceptions import SandboxException
    from e2b_code_interpreter import AsyncSandbox, Sandbox

    def flow() -> list[str]:
        sbx = Sandbox.create()
        try:
            calls: list[Callable[[], object]] = [
                sbx.create_code_context, sbx.list_code_contexts,
                lambda: sbx.create_code_context(language="r", cwd="/home/user"),
                lambda: sbx.restart_code_context("default"),
                lambda: sbx.remove_code_context("default")]
            refused = []
            for call in calls:
                with pytest.raises(SandboxException) as exc:
                    call()
                refused.append(str(exc.value))
            return refused
        finally:
            sbx.kill()

    refused = await sdk(flow)
    sbx = await AsyncSandbox.create()
    try:
        with pytest.raises(SandboxException) as exc:
            await sbx.create_code_context()
        refused.append(str(exc.value))
    finally:
        await sbx.kill()
    for message in refused:
        assert "code contexts are not supported" in message, message
        assert "E2B_API_KEY" not in message


async def test_unsupported_control_calls_raise_a_clear_error(e2b_env: Api) -> None:
    """Pause, metrics, logs, network updates and template builds are refused by name: never
    a silent success (the SDK reads 409 on pause as "already paused") nor "not found"."""
    from e2b import Sandbox
    from e2b.exceptions import SandboxException, SandboxNotFoundException

    def flow() -> tuple[list[str], bool]:
        sbx = Sandbox.create()
        try:
            calls: list[Callable[[], object]] = [
                sbx.pause, sbx.get_metrics,
                lambda: sbx.update_network({"deny_out": ["0.0.0.0/0"]})]
            refused = []
            for call in calls:
                with pytest.raises(SandboxException) as exc:
                    call()
                assert not isinstance(exc.value, SandboxNotFoundException), exc.value
                refused.append(str(exc.value))
            return refused, sbx.is_running()
        finally:
            sbx.kill()

    refused, running = await sdk(flow)
    assert "does not pause" in refused[0] and "metrics" in refused[1]
    assert "network" in refused[2] and running

    def build() -> str:
        from e2b import Template
        from e2b.exceptions import BuildException

        with pytest.raises(BuildException) as exc:
            Template.build(Template().from_python_image("3.11"), "mine")
        return str(exc.value)

    assert "onebox env build" in await sdk(build)


async def test_a_sandbox_past_its_timeout_is_deleted(e2b_env: Api) -> None:
    from e2b import Sandbox

    def flow() -> tuple[str, bool, list[str]]:
        sbx = Sandbox.create(timeout=1)
        gone = False
        for _ in range(200):  # the sweeper runs every second
            if not sbx.is_running():
                gone = True
                break
            threading.Event().wait(0.1)
        return sbx.sandbox_id, gone, [s.sandbox_id for s in Sandbox.list().next_items()]

    sandbox_id, gone, listed = await sdk(flow)
    assert gone and sandbox_id not in listed
    assert not e2b_env.rt.backend.workspace(sandbox_id).exists()


async def test_the_async_sdk_and_sandbox_envs(e2b_env: Api) -> None:
    from e2b_code_interpreter import AsyncSandbox

    sbx = await AsyncSandbox.create(envs={"STAGE": "test", "KEPT": "sandbox"})
    try:
        await sbx.run_code("import math\nr = 2")
        area = await sbx.run_code("math.pi * r ** 2")
        await sbx.files.write("/home/user/a.txt", "async")
        ran = await sbx.commands.run("cat a.txt; echo \" $STAGE $KEPT\"", envs={"KEPT": "call"})
        cell = await sbx.run_code("import os\nos.environ['STAGE']")
    finally:
        await sbx.kill()
    assert area.text is not None and area.text.startswith("12.566")
    assert ran.stdout == "async test call\n"  # the sandbox's envs, the call's win
    assert cell.text == "test"


async def test_a_file_object_over_the_json_bound_uploads(e2b_env: Api) -> None:
    """A file object goes as one octet-stream body: an upload, bounded like multipart."""
    from e2b import Sandbox

    size = e2b_env.settings.api.max_request_bytes * 2

    def flow() -> tuple[int, int]:
        sbx = Sandbox.create()
        try:
            sbx.files.write("big.bin", io.BytesIO(b"z" * size))
            return sbx.files.get_info("big.bin").size, len(sbx.files.read("big.bin", "bytes"))
        finally:
            sbx.kill()

    assert await sdk(flow) == (size, size)
