"""`onebox exec` as a user runs it: a subprocess, the real sandbox, a real database; with no
server (in-process) and through a running `onebox serve` (state kept between calls)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from onebox.config import Settings

ONEBOX = str(Path(sys.executable).with_name("onebox"))


def _env(settings: Settings, db_url: str, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ONEBOX_")}
    return {**base, "ONEBOX_HOME": str(settings.home), "DATABASE_URL": db_url,
            "ONEBOX_LOG_LEVEL": "ERROR", **extra}


def _exec(env: dict[str, str], *args: str, stdin: str | None = None,
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ONEBOX, "exec", *args], env=env, capture_output=True, text=True,
                          input=stdin, timeout=180, cwd=cwd)


@pytest.fixture
def env(settings: Settings, db_url: str) -> dict[str, str]:
    return _env(settings, db_url)


def test_exit_code_is_the_codes(env: dict[str, str]) -> None:
    ok = _exec(env, "--", "print(6 * 7)")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "42\n"
    value = _exec(env, "--", "x = 6\nx * 7")  # the last expression's value, as a REPL shows it
    assert (value.returncode, value.stdout) == (0, "42\n"), value.stderr
    assert _exec(env, "--", "import sys; sys.exit(3)").returncode == 3
    boom = _exec(env, "--", "raise KeyError('nope')")
    assert boom.returncode == 1 and "KeyError" in boom.stderr
    bash = _exec(env, "--lang", "bash", "--", "echo hi; exit 5")
    assert (bash.returncode, bash.stdout) == (5, "hi\n")


def test_timeout_exits_124_and_says_so(env: dict[str, str]) -> None:
    slow = _exec(env, "--timeout-s", "1", "--", "import time; time.sleep(30)")
    assert slow.returncode == 124, slow.stderr
    assert "timed out" in slow.stderr


def test_code_from_stdin_and_from_a_file(env: dict[str, str], tmp_path: Path) -> None:
    piped = _exec(env, stdin="print('from stdin')\n")
    assert (piped.returncode, piped.stdout) == (0, "from stdin\n"), piped.stderr
    script = tmp_path / "job.py"
    script.write_text("import sys\nprint('from file', file=sys.stderr)\n")
    filed = _exec(env, "-f", str(script))
    assert filed.returncode == 0 and "from file" in filed.stderr


def test_json_has_every_field(env: dict[str, str]) -> None:
    done = _exec(env, "--json", "--", "open('out.txt', 'w').write('x'); print('hi')")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    for key in ("exit_code", "stdout", "stderr", "timed_out", "truncated", "duration_ms",
                "memory_peak_mb", "files_written", "blocked_hosts", "results", "error",
                "state_lost", "session_id", "interpreter"):
        assert key in data, key
    assert data["interpreter"] == "in-process" and data["stdout"] == "hi\n"
    assert data["exit_code"] == 0 and data["timed_out"] is False
    assert [f["path"] for f in data["files_written"]] == ["out.txt"]
    assert data["session_id"].startswith("api-")


def test_blocked_hosts_are_reported(env: dict[str, str]) -> None:
    """One-shot runs and interpreter cells report them."""
    code = ("import urllib.request\ntry:\n    urllib.request.urlopen("
            "'http://blocked.example.org/', timeout=5)\nexcept Exception as e:\n"
            "    print(type(e).__name__)")
    done = _exec(env, "--stateless", "--allow-domain", "example.com", "--", code)
    assert "network blocked: blocked.example.org" in done.stderr, done.stderr
    data = json.loads(_exec(env, "--json", "--lang", "bash", "--allow-domain", "example.com",
                            "--", "curl -s -o /dev/null http://blocked.example.org/").stdout)
    assert data["blocked_hosts"] == ["blocked.example.org"], data
    cell = json.loads(_exec(env, "--json", "--allow-domain", "example.com", "--", code).stdout)
    assert cell["blocked_hosts"] == ["blocked.example.org"] and "results" in cell, cell


def test_a_kept_session_keeps_its_files(env: dict[str, str], settings: Settings,
                                        db_url: str) -> None:
    first = _exec(env, "--keep", "--json", "--", "open('note.txt', 'w').write('kept')")
    assert first.returncode == 0, first.stderr
    session = json.loads(first.stdout)["session_id"]
    assert f"--session {session}" in first.stderr
    again = _exec(env, "--session", session, "--", "print(open('note.txt').read())")
    assert (again.returncode, again.stdout) == (0, "kept\n"), again.stderr
    assert "interpreter state does not outlive" in again.stderr
    fresh = _exec(env, "--", "import os; print(os.path.exists('note.txt'))")
    assert fresh.stdout == "False\n"


def test_bad_flags_are_clear_errors(env: dict[str, str], tmp_path: Path) -> None:
    cases = [
        (["--session", "bogus", "--", "1"], "--session 'bogus' is not a session id"),
        (["--session", "api-0123456789abcdef", "--", "1"], "does not exist"),
        (["--lang", "ruby", "--", "1"], "'ruby' is not one of"),
        (["--timeout-s", "0", "--", "1"], "--timeout-s"),
        (["--memory-mb", "1", "--", "1"], "--memory-mb"),
        (["--env", "nope", "--", "1"], "environment 'nope' is not built"),
        (["--env", "data", "--session", "api-0123456789abcdef", "--", "1"],
         "--env applies to a new session"),
        ([], "no code to run"),
    ]
    script = tmp_path / "x.py"
    script.write_text("print(1)")
    cases.append((["-f", str(script), "--", "print(2)"], "not both"))
    for args, message in cases:
        done = _exec(env, *args, stdin="")
        assert done.returncode in (1, 2), (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


@pytest.fixture
def server(settings: Settings, db_url: str) -> Iterator[dict[str, str]]:
    """A running `onebox up` (auth on) recording its address and first key in ONEBOX_HOME."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _env(settings, db_url)
    proc = subprocess.Popen([ONEBOX, "up", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_up(f"http://127.0.0.1:{port}", proc)
        yield env
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert not (settings.home / "server-address").exists()


def _wait_up(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)


def test_exec_through_a_running_server(server: dict[str, str], settings: Settings) -> None:
    assert (settings.home / "server-address").read_text().startswith("http://127.0.0.1:")
    first = _exec(server, "--keep", "--json", "--", "open('f.txt', 'w').write('1'); x = 41")
    data = json.loads(first.stdout)
    assert data["interpreter"] == "server" and data["exit_code"] == 0, first.stderr
    session = data["session_id"]
    again = _exec(server, "--session", session, "--", "print(open('f.txt').read())")
    assert (again.returncode, again.stdout) == (0, "1\n"), again.stderr
    kept = _exec(server, "--session", session, "--", "x + 1")
    assert (kept.returncode, kept.stdout) == (0, "42\n"), kept.stderr
    raised = _exec(server, "--session", session, "--", "1 / 0")
    assert raised.returncode == 1 and "ZeroDivisionError" in raised.stderr
    failing = _exec(server, "--session", session, "--", "import sys; sys.exit(4)")
    assert failing.returncode == 4
    stranger = _exec({**server, "ONEBOX_API_KEY": "obx_wrong"}, "--", "print(1)")
    assert stranger.returncode == 2 and "Traceback" not in stranger.stderr
    assert "API key" in stranger.stderr or "unauthorized" in stranger.stderr.lower()


def test_a_second_server_on_a_busy_port_leaves_the_first_alone(server: dict[str, str],
                                                               settings: Settings) -> None:
    """`onebox up` or `onebox mcp --http` on the port a running `onebox up` holds: a clear
    error before any banner, and the first server keeps its record, its sessions and their
    interpreter state."""
    record = settings.home / "server-address"
    url = record.read_text().strip()
    port = url.rsplit(":", 1)[1]
    first = _exec(server, "--keep", "--json", "--", "x = 41")
    session = json.loads(first.stdout)["session_id"]
    for argv in (["up", "--port", port], ["serve", "--port", port, "--no-auth"],
                 ["mcp", "--http", "--port", port]):
        second = subprocess.run([ONEBOX, *argv], env=server, capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2, (argv, second.stdout, second.stderr)
        assert "onebox is up" not in second.stdout and "obx_" not in second.stdout
        assert f"port {port}" in second.stderr and "--port" in second.stderr, second.stderr
        assert f"onebox is already running at {url}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr and "onebox MCP on" not in second.stderr
        assert "no-auth:" not in second.stderr and "console on" not in second.stderr
        assert record.read_text().strip() == url
    kept = _exec(server, "--session", session, "--", "x + 1")
    assert (kept.returncode, kept.stdout) == (0, "42\n"), kept.stderr
    again = _exec(server, "--session", session, "--", "x + 2")
    assert (again.returncode, again.stdout) == (0, "43\n"), again.stderr


def _up(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([ONEBOX, "up", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_up(f"http://127.0.0.1:{port}", proc)
    return proc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_session_whose_server_was_killed_says_its_state_was_lost(
        settings: Settings, db_url: str) -> None:
    """kill -9 the server holding a session's interpreter, start another on the same home:
    the next call in the session says state_lost (with why) at once (not after the dead
    server's lease), the variable is gone and the workspace's files are still there."""
    env, port = _env(settings, db_url), _free_port()
    first = _up(env, port)
    second = None
    try:
        made = _exec(env, "--keep", "--json", "--", "x = 1; open('f.txt', 'w').write('kept')")
        session = json.loads(made.stdout)["session_id"]
        kept = json.loads(_exec(env, "--session", session, "--json", "--", "print(x + 1)").stdout)
        assert kept["stdout"] == "2\n" and kept["state_lost"] is False, kept
        first.kill()
        first.wait(timeout=60)
        second = _up(env, port)
        after = _exec(env, "--session", session, "--json", "--",
                      "print('x' in dir(), open('f.txt').read())")
        assert after.returncode == 0, after.stderr
        data = json.loads(after.stdout)
        assert data["state_lost"] is True and data["restart_reason"], (data, after.stderr)
        assert data["stdout"] == "False kept\n", data  # the files stay, on the same home
        assert "moved from server" in data["restart_reason"], data
        again = json.loads(_exec(env, "--session", session, "--json", "--", "1").stdout)
        assert again["state_lost"] is False, again
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
