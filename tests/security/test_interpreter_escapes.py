"""The stateful interpreter treats everything from inside the sandbox as hostile: garbage,
huge or flooding frames kill that interpreter (never the host), it runs as the session's
unprivileged uid with no network, nothing of it outlives cleanup, and another session
cannot reach it."""

from __future__ import annotations

import uuid
from pathlib import Path

from onebox.sandbox.base import CellRequest, CellResult
from onebox.sandbox.linux import BwrapSandbox

CHANNEL = "import sys, struct\nch = sys.modules['__main__']._channel\n"


def new_session() -> str:
    return f"sec-interp-{uuid.uuid4().hex[:10]}"


async def cell(backend: BwrapSandbox, sid: str, code: str) -> CellResult:
    return await backend.run_cell(CellRequest(sid, code))


def interpreter_pids(session_id: str) -> list[int]:
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


async def _killed_by(linux: BwrapSandbox, payload: str) -> CellResult:
    sid = new_session()
    await cell(linux, sid, "x = 1")
    result = await cell(linux, sid, CHANNEL + payload)
    after = await cell(linux, sid, "'x' in globals()")
    assert after.results[0].data["text/plain"] == "False" and after.state_lost
    await linux.cleanup(sid)
    return result


async def test_a_huge_frame_header_kills_the_interpreter_not_the_host(linux: BwrapSandbox) -> None:
    result = await _killed_by(linux, "ch.sendall(b'\\xff\\xff\\xff\\xff' + b'x' * 100)")
    assert result.state_lost and result.restart_reason is not None
    assert "broke the interpreter protocol" in result.restart_reason
    assert "over the" in result.restart_reason


async def test_a_frame_that_is_not_json_kills_the_interpreter(linux: BwrapSandbox) -> None:
    result = await _killed_by(linux, "ch.sendall(struct.pack('>I', 6) + b'\\x00\\xffnot')")
    assert result.restart_reason is not None and "not JSON" in result.restart_reason


async def test_a_frame_of_the_wrong_shape_kills_the_interpreter(linux: BwrapSandbox) -> None:
    body = b'{"type": "result", "data": {"text/plain": 5}}'
    result = await _killed_by(linux, f"ch.sendall(struct.pack('>I', {len(body)}) + {body!r})")
    assert result.restart_reason is not None and "non-text value" in result.restart_reason


async def test_a_flood_of_frames_kills_the_interpreter(linux: BwrapSandbox) -> None:
    body = b'{"type": "result", "data": {"text/plain": "x"}, "main": true}'
    frame = f"struct.pack('>I', {len(body)}) + {body!r}"
    result = await _killed_by(linux, f"f = {frame}\nch.sendall(f * 20000)")
    assert result.restart_reason is not None and "more than" in result.restart_reason
    assert len(result.results) <= 10_000


async def test_the_interpreter_runs_as_the_session_user_without_network(
    linux: BwrapSandbox,
) -> None:
    sid = new_session()
    code = ("import os, socket\nuid = os.getuid()\n"
            "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
            "    net = 'open'\nexcept OSError as exc:\n    net = type(exc).__name__\n(uid, net)")
    result = await cell(linux, sid, code)
    assert result.results[0].data["text/plain"] == "(1000, 'OSError')"
    for pid in interpreter_pids(sid):
        uids = Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[:4]
        assert "0" not in uids, f"interpreter pid {pid} has host uid 0: {uids}"
    await linux.cleanup(sid)
    assert interpreter_pids(sid) == []


async def test_another_session_cannot_reach_the_interpreter(linux: BwrapSandbox) -> None:
    victim, attacker = new_session(), new_session()
    await cell(linux, victim, "secret = 'victim-secret'")
    probe = ("import os, socket\nseen = []\n"
             "for pid in os.listdir('/proc'):\n"
             "    if pid.isdigit():\n"
             "        try: seen.append(open(f'/proc/{pid}/environ', 'rb').read())\n"
             "        except OSError: pass\n"
             f"leak = any(b'{victim}' in e for e in seen)\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect('/run/onebox/interp.sock'); connected = True\n"
             "except OSError:\n    connected = False\n(leak, connected)")
    result = await cell(linux, attacker, probe)
    assert result.error is None, result.error
    assert result.results[0].data["text/plain"] == "(False, False)"
    again = await cell(linux, victim, "secret")
    assert again.results[0].data["text/plain"] == "'victim-secret'"
    await linux.cleanup(victim)
    await linux.cleanup(attacker)
