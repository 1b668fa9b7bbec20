"""The SandboxBackend contract: every backend passes these (isolation cases are marked)."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from onebox.config import SandboxSettings, load_settings
from onebox.errors import PolicyViolation
from onebox.sandbox.base import ExecRequest, Limits, SandboxBackend
from onebox.sandbox.registry import get_backend, linux_available

BACKENDS = ["linux", "process"]
pytestmark = pytest.mark.asyncio(loop_scope="session")


def _isolated(backend: SandboxBackend) -> None:
    if backend.isolation == "none":
        pytest.skip("isolation-specific: the process backend provides no isolation (by design)")


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=BACKENDS)
async def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SandboxBackend]:
    if request.param == "linux" and linux_available():
        pytest.skip("linux backend unavailable here: " + "; ".join(linux_available()))
    home = tmp_path_factory.mktemp(f"sbx-{request.param}")
    sandbox = SandboxSettings(
        backend=request.param, timeout_s=20, disk_mb=64, pool_size=1, idle_timeout_s=600
    )
    settings = load_settings(home=home, sandbox=sandbox)
    be = get_backend(settings)
    yield be
    await be.close()


def _sid(name: str, backend: SandboxBackend) -> str:
    return f"{name}-{backend.name}"


async def run(backend: SandboxBackend, sid: str, code: str, **kw: object) -> object:
    return await backend.execute(ExecRequest(session_id=sid, code=code, **kw))  # type: ignore[arg-type]


async def test_python_runs_and_reports(backend: SandboxBackend) -> None:
    r = await backend.execute(ExecRequest(session_id=_sid("py", backend), code="print(6*7)"))
    assert r.ok and r.exit_code == 0
    assert r.stdout == "42\n"
    assert r.backend == backend.name and r.isolation == backend.isolation
    assert r.duration_ms > 0
    assert r.enforcement, "the result must say which mechanism enforced what"


async def test_nonzero_exit_is_data(backend: SandboxBackend) -> None:
    code = "import sys; print('bad', file=sys.stderr); sys.exit(3)"
    r = await backend.execute(ExecRequest(session_id=_sid("exit", backend), code=code))
    assert not r.ok and r.exit_code == 3
    assert "bad" in r.stderr
    assert r.error is None


@pytest.mark.parametrize("language,code", [("bash", "echo $((6*7))"), ("node", "console.log(6*7)")])
async def test_languages(backend: SandboxBackend, language: str, code: str) -> None:
    if language == "node" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    req = ExecRequest(session_id=_sid("lang", backend), code=code, language=language)  # type: ignore[arg-type]
    r = await backend.execute(req)
    assert r.ok, r.stderr
    assert r.stdout.strip() == "42"


async def test_argv_stdin_and_env(backend: SandboxBackend) -> None:
    req = ExecRequest(
        session_id=_sid("argv", backend),
        argv=("bash", "-c", 'read line; echo "$line-$GREETING"'),
        stdin=b"hello\n",
        env={"GREETING": "world"},
    )
    r = await backend.execute(req)
    assert r.ok, r.stderr
    assert r.stdout == "hello-world\n"


async def test_host_secrets_are_not_in_the_environment(
    backend: SandboxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    monkeypatch.setenv("DATABASE_URL", "postgresql://host-secret")
    code = "import os; print(sorted(os.environ))"
    r = await backend.execute(ExecRequest(session_id=_sid("env", backend), code=code))
    assert r.ok
    assert "OPENAI_API_KEY" not in r.stdout and "DATABASE_URL" not in r.stdout


async def test_session_shares_workspace_across_calls(backend: SandboxBackend) -> None:
    sid = _sid("share", backend)
    r1 = await run(backend, sid, "open('note.txt', 'w').write('step one')")
    r2 = await run(backend, sid, "print(open('note.txt').read())")
    assert r1.ok and r2.ok, (r1.stderr, r2.stderr)  # type: ignore[attr-defined]
    assert r2.stdout == "step one\n"  # type: ignore[attr-defined]
    assert (backend.workspace(sid) / "note.txt").read_text() == "step one"


async def test_sessions_are_separate(backend: SandboxBackend) -> None:
    await run(backend, _sid("sep-a", backend), "open('mine.txt', 'w').write('a')")
    r = await run(backend, _sid("sep-b", backend), "import os; print(os.path.exists('mine.txt'))")
    assert r.stdout == "False\n"  # type: ignore[attr-defined]


async def test_request_files_and_files_written(backend: SandboxBackend) -> None:
    sid = _sid("files", backend)
    await run(backend, sid, "open('old.txt','w').write('x'); open('gone.txt','w').write('y')")
    code = (
        "import os\n"
        "print(open('data/input.csv').read())\n"
        "open('new.txt', 'w').write('fresh')\n"
        "open('old.txt', 'a').write('more')\n"
        "os.remove('gone.txt')\n"
    )
    r = await backend.execute(
        ExecRequest(session_id=sid, code=code, files={"data/input.csv": b"a,b\n1,2\n"})
    )
    assert r.ok, r.stderr
    assert "a,b" in r.stdout
    changes = {c.path: c for c in r.files_written}
    assert changes["new.txt"].change == "created"
    assert changes["new.txt"].size == 5
    assert changes["new.txt"].sha256 == hashlib.sha256(b"fresh").hexdigest()
    assert changes["old.txt"].change == "modified"
    assert changes["gone.txt"].change == "deleted"
    assert not any(p.startswith("entry") or "/entry" in p for p in changes)


async def test_bad_paths_and_ids_are_refused(backend: SandboxBackend) -> None:
    with pytest.raises(PolicyViolation):
        await run(backend, "../escape", "print(1)")
    with pytest.raises(PolicyViolation):
        await backend.execute(
            ExecRequest(session_id=_sid("bad", backend), code="1", files={"../x": b"1"})
        )


async def test_timeout_kills_and_keeps_workspace(backend: SandboxBackend) -> None:
    sid = _sid("timeout", backend)
    code = "open('before.txt','w').write('1')\nimport time\nwhile True: time.sleep(0.1)"
    r = await run(backend, sid, code, limits=Limits(timeout_s=1))
    assert r.timed_out and not r.ok  # type: ignore[attr-defined]
    assert r.duration_ms < 10_000  # type: ignore[attr-defined]
    assert "timed out" in (r.error or "")  # type: ignore[attr-defined]
    assert (backend.workspace(sid) / "before.txt").exists()


async def test_output_is_capped_head_and_tail(backend: SandboxBackend) -> None:
    code = "import sys\nsys.stdout.write('HEAD' + 'x' * 5_000_000 + 'TAIL')"
    r = await run(backend, _sid("flood", backend), code, limits=Limits(max_output_bytes=10_000))
    assert r.truncated  # type: ignore[attr-defined]
    assert len(r.stdout) < 12_000  # type: ignore[attr-defined]
    assert r.stdout.startswith("HEAD") and r.stdout.endswith("TAIL")  # type: ignore[attr-defined]


async def test_memory_and_cpu_are_measured(backend: SandboxBackend) -> None:
    code = (
        "block = bytearray(120 * 1024 * 1024)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        "n = 0\n"
        "for i in range(3_000_000): n += i\n"
    )
    r = await run(backend, _sid("measure", backend), code)
    assert r.ok, r.stderr  # type: ignore[attr-defined]
    assert r.memory_peak_mb is not None and r.memory_peak_mb >= 100  # type: ignore[attr-defined]
    assert r.cpu_time_ms is not None and r.cpu_time_ms >= 50  # type: ignore[attr-defined]
    assert r.cpu_percent is not None  # type: ignore[attr-defined]


async def test_concurrent_calls_in_one_session(backend: SandboxBackend) -> None:
    sid = _sid("conc", backend)
    calls = [run(backend, sid, f"open('f{i}.txt','w').write('{i}'); print({i})") for i in range(6)]
    results = await asyncio.gather(*calls)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]  # type: ignore[attr-defined]
    assert sorted(p.name for p in backend.workspace(sid).glob("f*.txt")) == [
        f"f{i}.txt" for i in range(6)
    ]


async def test_concurrent_calls_across_sessions(backend: SandboxBackend) -> None:
    calls = [run(backend, _sid(f"many{i}", backend), f"print({i})") for i in range(6)]
    results = await asyncio.gather(*calls)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]  # type: ignore[attr-defined]


async def test_cleanup_and_session_reset(backend: SandboxBackend) -> None:
    sid = _sid("reset", backend)
    await run(backend, sid, "open('keep.txt','w').write('1')")
    live = backend.live_sessions()  # type: ignore[attr-defined]
    await backend.cleanup(sid)
    assert backend.live_sessions() == live - 1  # type: ignore[attr-defined]
    r = await run(backend, sid, "import os; print(os.path.exists('keep.txt'))")
    assert r.session_reset and r.stdout == "False\n"  # type: ignore[attr-defined]
    r2 = await run(backend, sid, "print(1)")
    assert not r2.session_reset  # type: ignore[attr-defined]


async def test_health_and_close(backend: SandboxBackend) -> None:
    health = backend.health()
    assert health.backend == backend.name and health.isolation == backend.isolation
    if backend.isolation == "none":
        assert any("NO isolation" in p for p in health.problems)


async def test_reaper_cleans_idle_sessions(tmp_path: Path) -> None:
    for name in BACKENDS:
        if name == "linux" and linux_available():
            continue
        sandbox = SandboxSettings(backend=name, idle_timeout_s=0.3, pool_size=0, disk_mb=16)
        be = get_backend(load_settings(home=tmp_path / name, sandbox=sandbox))
        try:
            await be.execute(ExecRequest(session_id="idle", code="print(1)"))
            assert be.live_sessions() == 1  # type: ignore[attr-defined]
            for _ in range(40):
                await asyncio.sleep(0.1)
                if be.live_sessions() == 0:  # type: ignore[attr-defined]
                    break
            assert be.live_sessions() == 0  # type: ignore[attr-defined]
            assert not be.workspace("idle").exists()
        finally:
            await be.close()


# -- isolation-specific: skipped for the process backend ---------------------------------


async def test_memory_limit_is_enforced(backend: SandboxBackend) -> None:
    _isolated(backend)
    code = "b = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"
    r = await run(backend, _sid("oom", backend), code, limits=Limits(memory_mb=128))
    assert not r.ok and "survived" not in r.stdout  # type: ignore[attr-defined]
    assert "out of memory" in (r.error or "")  # type: ignore[attr-defined]


async def test_limits_are_visible_inside(backend: SandboxBackend) -> None:
    _isolated(backend)
    code = (
        "import os\n"
        "print(os.cpu_count(), len(os.sched_getaffinity(0)))\n"
        "print(open('/proc/meminfo').readline().split()[1])\n"
        "print(open('/proc/cpuinfo').read().count('processor'))\n"
    )
    r = await run(backend, _sid("visible", backend), code, limits=Limits(memory_mb=300, cpus=1))
    assert r.ok, r.stderr  # type: ignore[attr-defined]
    assert r.stdout.split() == ["1", "1", str(300 * 1024), "1"]  # type: ignore[attr-defined]


async def test_no_network_by_default(backend: SandboxBackend) -> None:
    _isolated(backend)
    code = (
        "import socket\n"
        "s = socket.socket(); s.settimeout(2)\n"
        "try:\n    s.connect(('1.1.1.1', 80)); print('connected')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
    )
    r = await run(backend, _sid("nonet", backend), code)
    assert "refused" in r.stdout  # type: ignore[attr-defined]


async def test_workspace_survives_a_restart_of_the_backend(tmp_path: Path) -> None:
    """An interrupted run resumes in a new process: its session's files are still there."""
    for name in BACKENDS:
        if name == "linux" and linux_available():
            continue
        sandbox = SandboxSettings(backend=name, pool_size=0, disk_mb=16)
        settings = load_settings(home=tmp_path / name, sandbox=sandbox)
        first = get_backend(settings)
        await first.execute(ExecRequest(session_id="resume", code="open('a.txt','w').write('1')"))
        await first.close()
        second = get_backend(settings)
        try:
            r = await second.execute(
                ExecRequest(session_id="resume", code="print(open('a.txt').read())")
            )
            assert r.ok and r.stdout == "1\n", r.stderr
            assert not r.session_reset
        finally:
            await second.cleanup("resume")
            await second.close()


async def test_many_new_sessions_in_a_row(backend: SandboxBackend) -> None:
    """New sessions are served by pre-created sandboxes while the pool refills behind them."""
    for i in range(10):
        sid = _sid(f"row{i}", backend)
        r = await run(backend, sid, f"open('x','w').write('{i}'); print(open('x').read())")
        assert r.ok and r.stdout == f"{i}\n", r.stderr  # type: ignore[attr-defined]
        assert (backend.workspace(sid) / "x").read_text() == str(i)


async def test_large_stdin_and_missing_program(backend: SandboxBackend) -> None:
    data = b"x" * (2 * 1024 * 1024)
    r = await backend.execute(
        ExecRequest(session_id=_sid("stdin", backend), argv=("wc", "-c"), stdin=data)
    )
    assert r.ok and r.stdout.strip() == str(len(data)), r.stderr
    missing = await backend.execute(
        ExecRequest(session_id=_sid("stdin", backend), argv=("no-such-program-xyz",))
    )
    assert not missing.ok and missing.exit_code == 127
