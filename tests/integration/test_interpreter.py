"""The stateful interpreter (issue 15 part 2) on the real linux backend: state persists
between calls, values and rich outputs come back typed, output streams in order, and a
timeout, an out-of-memory kill or a policy change restarts it and says state was lost."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from onebox.config import SandboxSettings, load_settings
from onebox.sandbox.base import CellOutput, CellRequest, CellResult, Limits, NetworkPolicy
from onebox.sandbox.linux import BwrapSandbox
from onebox.sandbox.registry import linux_available

pytestmark = pytest.mark.skipif(bool(linux_available()), reason="linux backend unavailable")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def linux(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BwrapSandbox]:
    home = tmp_path_factory.mktemp("interp-home")
    os.chmod(home, 0o755)
    sandbox = SandboxSettings(backend="linux", pool_size=0, timeout_s=20)  # type: ignore[call-arg]
    backend = BwrapSandbox(load_settings(home=home / "home", sandbox=sandbox))
    yield backend
    await backend.close()


def new_session() -> str:
    return f"it-{uuid.uuid4().hex[:12]}"


async def cell(backend: BwrapSandbox, sid: str, code: str, **options: object) -> CellResult:
    return await backend.run_cell(CellRequest(sid, code, **options))  # type: ignore[arg-type]


def main_text(result: CellResult) -> str | None:
    mains = [r for r in result.results if r.is_main_result]
    return mains[0].data["text/plain"] if mains else None


def interpreter_pids(session_id: str) -> list[int]:
    """Host pids of processes running the interpreter server for ``session_id``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"interp_server.py" in cmdline and f"ONEBOX_SESSION_ID={session_id}\0".encode() in \
                environ:
            found.append(int(entry.name))
    return found


async def test_variables_persist_and_the_last_expression_is_returned(linux: BwrapSandbox) -> None:
    sid = new_session()
    first = await cell(linux, sid, "x = 41")
    assert first.ok and first.results == () and first.execution_count == 1
    second = await cell(linux, sid, "x + 1")
    assert main_text(second) == "42" and second.execution_count == 2
    assert not second.state_lost and second.restart_reason is None


async def test_imports_and_open_files_persist(linux: BwrapSandbox) -> None:
    sid = new_session()
    await cell(linux, sid, "import json\nlog = open('log.txt', 'w')\nlog.write('a')")
    result = await cell(linux, sid, "log.write('b'); log.close()\njson.dumps(open('log.txt').read())")
    assert result.error is None, result.error
    assert main_text(result) == "'\"ab\"'"
    assert [f.path for f in result.files_written] == ["log.txt"]


async def test_rich_outputs_from_repr_methods_and_display(linux: BwrapSandbox) -> None:
    sid = new_session()
    code = ("class Pic:\n"
            "    def _repr_html_(self): return '<b>pic</b>'\n"
            "    def _repr_png_(self): return b'\\x89PNG fake'\n"
            "    def _repr_json_(self): return {'k': 1}\n"
            "display('shown')\n"
            "Pic()")
    result = await cell(linux, sid, code)
    assert result.error is None, result.error
    shown, main = result.results
    assert not shown.is_main_result and shown.data == {"text/plain": "'shown'"}
    assert main.is_main_result and main.data["text/html"] == "<b>pic</b>"
    assert base64.b64decode(main.data["image/png"]) == b"\x89PNG fake"
    assert main.data["application/json"] == '{"k": 1}'


async def test_an_exception_comes_back_with_the_cells_traceback_only(linux: BwrapSandbox) -> None:
    sid = new_session()
    result = await cell(linux, sid, "def f():\n    return 1 / 0\nprint('before')\nf()")
    assert result.stdout == "before\n" and not result.ok
    assert result.error is not None and result.error.name == "ZeroDivisionError"
    assert result.error.value == "division by zero"
    assert "in f" in result.error.traceback and "return 1 / 0" in result.error.traceback
    assert "interp_server" not in result.error.traceback
    again = await cell(linux, sid, "f.__name__")  # the interpreter lives on after an error
    assert main_text(again) == "'f'" and not again.state_lost


async def test_a_timeout_kills_the_interpreter_and_the_next_call_says_state_was_lost(
    linux: BwrapSandbox,
) -> None:
    sid = new_session()
    await cell(linux, sid, "x = 1")
    slow = await cell(linux, sid, "print('spinning', flush=True)\nwhile True: pass",
                      limits=Limits(timeout_s=1))
    assert slow.timed_out and slow.state_lost and slow.stdout == "spinning\n"
    assert slow.restart_reason == ("the interpreter was killed: it ran past its 1 s timeout; "
                                   "variables and imports are gone")
    fresh = await cell(linux, sid, "x")
    assert fresh.error is not None and fresh.error.name == "NameError"
    assert fresh.state_lost and fresh.execution_count == 1
    assert fresh.restart_reason is not None and "1 s timeout" in fresh.restart_reason
    assert "fresh interpreter" in fresh.restart_reason
    after = await cell(linux, sid, "y = 2\ny")
    assert main_text(after) == "2" and not after.state_lost


async def test_out_of_memory_kills_the_interpreter_and_says_so(linux: BwrapSandbox) -> None:
    sid = new_session()
    limits = Limits(memory_mb=64)
    await cell(linux, sid, "x = 1", limits=limits)
    result = await cell(linux, sid, "blob = b'x' * (512 << 20)", limits=limits)
    assert result.state_lost and not result.ok
    assert result.error is not None and result.error.name == "InterpreterKilled"
    assert result.restart_reason is not None and "out of memory" in result.restart_reason
    assert "64 MB" in result.restart_reason


async def test_a_different_network_policy_restarts_the_interpreter(linux: BwrapSandbox) -> None:
    sid = new_session()
    await cell(linux, sid, "x = 1")
    changed = await cell(linux, sid, "'x' in globals()",
                         network=NetworkPolicy(allow_domains=("example.com",)))
    assert main_text(changed) == "False" and changed.state_lost
    assert changed.restart_reason is not None and "network policy" in changed.restart_reason


async def test_raw_fd_writes_and_subprocess_output_are_captured(linux: BwrapSandbox) -> None:
    sid = new_session()
    code = ("import os, subprocess, sys\nos.write(1, b'raw\\n')\n"
            "subprocess.run(['sh', '-c', 'echo sub; echo suberr >&2'])\nprint('err', file=sys.stderr)")
    result = await cell(linux, sid, code)
    assert result.stdout == "raw\nsub\n" and result.stderr == "suberr\nerr\n"


async def test_output_and_results_stream_in_the_order_they_happen(linux: BwrapSandbox) -> None:
    sid = new_session()
    events: list[tuple[str, str]] = []

    def on_output(stream: str, chunk: bytes) -> None:
        if events and events[-1][0] == stream:  # one print may arrive as several chunks
            events[-1] = (stream, events[-1][1] + chunk.decode())
        else:
            events.append((stream, chunk.decode()))

    def on_result(output: CellOutput) -> None:
        events.append(("result", output.data["text/plain"]))

    code = "print('a')\ndisplay(1)\nprint('b')\ndisplay(2)\n3"
    result = await linux.run_cell(CellRequest(sid, code, on_output=on_output, on_result=on_result))
    assert events == [("stdout", "a\n"), ("result", "1"), ("stdout", "b\n"), ("result", "2"),
                      ("result", "3")]
    assert result.stdout == "a\nb\n"


async def test_cleanup_kills_the_interpreter(linux: BwrapSandbox) -> None:
    sid = new_session()
    await cell(linux, sid, "x = 1")
    assert interpreter_pids(sid)
    await linux.cleanup(sid)
    assert interpreter_pids(sid) == []
    again = await cell(linux, sid, "'x' in globals()")
    assert main_text(again) == "False" and again.state_lost
    assert again.restart_reason is not None and "deleted" in again.restart_reason
    await linux.cleanup(sid)


async def test_interrupt_kills_a_running_cell(linux: BwrapSandbox) -> None:
    import asyncio

    sid = new_session()
    await cell(linux, sid, "x = 1")
    running = asyncio.ensure_future(cell(linux, sid, "import time\ntime.sleep(60)"))
    while not linux.interpreters.running(sid):
        await asyncio.sleep(0.01)
    assert linux.interrupt(sid) == 1
    result = await running
    assert result.state_lost and result.restart_reason is not None
    assert "interrupted" in result.restart_reason
    assert interpreter_pids(sid) == []
