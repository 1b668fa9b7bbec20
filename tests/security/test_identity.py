"""No host privilege inside a sandbox: the identity it runs as, /proc, /dev, sockets, mounts.

Each probe targets something this kernel has (checked on the host first), so a test
that passes means the protection held, not that the target was missing.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sbx_helpers import DISK_MB, sh

from onebox.config import SandboxSettings, load_settings
from onebox.errors import SandboxUnavailable
from onebox.sandbox.base import ExecRequest
from onebox.sandbox.identity import SessionIdentities
from onebox.sandbox.linux import BwrapSandbox

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="per-session uids need root")

HOST_WIDE_SYSCTLS = ("fs/file-max", "vm/drop_caches", "kernel/pid_max", "kernel/core_pattern")


def _errno_of_write(path: str) -> str:
    """Python run inside: open ``path`` for writing and, for three numeric settings only,
    write a value the kernel rejects (EINVAL means the write was permitted). Nothing is
    written anywhere else (core_pattern, /proc/bus...), so a failing protection changes
    nothing on the host."""
    return (
        "import errno, os\n"
        f"p = {path!r}\n"
        "try:\n"
        "    fd = os.open(p, os.O_WRONLY)\n"
        "    try:\n"
        "        if p.endswith(('fs/file-max', 'vm/drop_caches', 'kernel/pid_max')):\n"
        "            os.write(fd, b'not-a-number\\n')\n"
        "        print('OPENED')\n"
        "    finally:\n"
        "        os.close(fd)\n"
        "except OSError as e:\n"
        "    print(errno.errorcode.get(e.errno, e.errno))\n"
    )


@pytest.mark.parametrize("sysctl", HOST_WIDE_SYSCTLS)
async def test_host_kernel_settings_cannot_be_opened_for_writing(
    linux: BwrapSandbox, sysctl: str
) -> None:
    path = f"/proc/sys/{sysctl}"
    assert os.path.exists(path), f"the probe's target {path} must exist on this kernel"
    r = await sh(linux, f"import os; print(os.path.exists({path!r}))\n" + _errno_of_write(path))
    lines = r.stdout.split()
    assert lines[0] == "True", "the probe must reach the file inside the sandbox"
    # EINVAL would mean the kernel granted the write and only rejected the value.
    assert lines[1] in ("EACCES", "EROFS", "EPERM"), r.stdout + r.stderr


@pytest.mark.parametrize("name", ["irq", "bus", "fs", "sysrq-trigger"])
async def test_host_wide_proc_entries_are_read_only(linux: BwrapSandbox, name: str) -> None:
    path = f"/proc/{name}"
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist on this kernel")
    target = path if not os.path.isdir(path) else _first_writable_file(path)
    if target is None:
        pytest.skip(f"no file under {path} is writable by root on the host")
    r = await sh(linux, _errno_of_write(target))
    assert r.stdout.strip() in ("EACCES", "EROFS", "EPERM"), (target, r.stdout, r.stderr)


def _first_writable_file(root: str) -> str | None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            if os.stat(full).st_mode & 0o200:
                return full
    return None


@pytest.mark.parametrize("name", ["keys", "key-users", "timer_list", "kallsyms", "kcore",
                                  "sched_debug", "acpi", "driver", "iomem"])
async def test_kernel_internals_in_proc_are_masked(linux: BwrapSandbox, name: str) -> None:
    path = f"/proc/{name}"
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist on this kernel")
    if os.path.isdir(path):  # covered by an empty read-only tmpfs, not the kernel's procfs
        code = (f"import os; print(len(os.listdir({path!r})), "
                f"os.stat({path!r}).st_dev != os.stat('/proc').st_dev)")
        r = await sh(linux, code)
        assert r.stdout.split() == ["0", "True"], r.stdout + r.stderr
        return
    code = (
        "try:\n"
        f"    print(len(open({path!r}, 'rb').read(4096)))\n"
        "except OSError as e:\n"
        "    print('denied', e.errno)\n"
    )
    r = await sh(linux, code)
    assert r.stdout.strip() == "0" or r.stdout.startswith("denied"), r.stdout + r.stderr


async def test_mount_table_shows_no_path_of_the_onebox_home(linux: BwrapSandbox) -> None:
    r = await sh(linux, "print(open('/proc/self/mountinfo').read())")
    assert "/workspace" in r.stdout and "/run/onebox" in r.stdout
    home = str(linux.settings.home)
    assert home not in r.stdout
    assert ".onebox" not in r.stdout and "workspaces" not in r.stdout


UNUSED_FAMILIES = {
    "AF_VSOCK": 40, "AF_ALG": 38, "AF_KEY": 15, "AF_PACKET": 17, "AF_TIPC": 30,
    "AF_BLUETOOTH": 31, "AF_CAN": 29, "AF_XDP": 44, "AF_RDS": 21, "unknown-200": 200,
}  # fmt: skip


async def test_unused_socket_families_are_refused(linux: BwrapSandbox) -> None:
    code = (
        "import socket\n"
        f"for name, fam in {UNUSED_FAMILIES!r}.items():\n"
        "    for call in (socket.socket, socket.socketpair):\n"
        "        try:\n"
        "            s = call(fam, socket.SOCK_DGRAM if fam != 17 else socket.SOCK_RAW)\n"
        "            print(name, call.__name__, 'CREATED')\n"
        "        except OSError as e:\n"
        "            print(name, call.__name__, e.errno)\n"
        "a, b = socket.socketpair(); print('unix ok')\n"
        "s = socket.socket(socket.AF_INET6); print('inet6 ok')\n"
    )
    r = await sh(linux, code)
    assert "CREATED" not in r.stdout, r.stdout
    for name in UNUSED_FAMILIES:
        assert f"{name} socket {errno.EAFNOSUPPORT}" in r.stdout, (name, r.stdout)
    assert "unix ok" in r.stdout and "inet6 ok" in r.stdout


def test_the_vsock_probe_reaches_a_real_family() -> None:
    """The host itself can create an AF_VSOCK socket: refusing it inside is the filter's doing."""
    try:
        socket.socket(40, socket.SOCK_STREAM).close()
    except OSError as exc:
        pytest.skip(f"AF_VSOCK is not available on this host ({exc})")


async def test_tmpfs_mounts_are_sized_from_the_limits_without_cgroups(sec_home: Path) -> None:
    sandbox = SandboxSettings(backend="linux", pool_size=0, disk_mb=DISK_MB, timeout_s=20)
    backend = BwrapSandbox(load_settings(home=sec_home / "shm-no-cgroups", sandbox=sandbox))
    backend.cgroups = None
    try:
        code = (
            "import os\n"
            "for p in ('/dev/shm', '/tmp'):\n"
            "    st = os.statvfs(p); print(p, st.f_blocks * st.f_frsize // (1024 * 1024))\n"
        )
        r = await sh(backend, code, memory_mb=64)
        sizes = dict(line.split() for line in r.stdout.splitlines())
        assert int(sizes["/dev/shm"]) <= 64, r.stdout
        assert int(sizes["/tmp"]) <= DISK_MB, r.stdout
        fill = await sh(backend, "head -c 100M /dev/zero > /dev/shm/fill; echo rc=$?",
                        language="bash", memory_mb=64)
        assert "rc=0" not in fill.stdout
    finally:
        await backend.close()


# -- the host identity -------------------------------------------------------------


@as_root
async def test_sandbox_processes_run_as_an_unprivileged_host_uid(linux: BwrapSandbox) -> None:
    task = asyncio.ensure_future(sh(linux, "import time; time.sleep(3)", session="who"))
    uids: set[int] = set()
    for _ in range(200):
        await asyncio.sleep(0.02)
        for blocked in list(linux._running.get("who", ())):
            if blocked.child_pid:
                uids |= _host_uids(blocked.child_pid)
        if uids:
            break
    await task
    assert uids, "the probe must see the sandbox's process on the host"
    lo, hi = linux.cfg.session_uid_min, linux.cfg.session_uid_max
    assert all(lo <= uid <= hi for uid in uids), uids
    owner = linux.workspace("who").stat()
    assert owner.st_uid in uids and owner.st_mode & 0o777 == 0o700


def _host_uids(pid: int) -> set[int]:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return set()
    line = next(ln for ln in status.splitlines() if ln.startswith("Uid:"))
    return {int(x) for x in line.split()[1:]}


@as_root
async def test_an_escaped_session_user_cannot_read_another_sessions_workspace(
    linux: BwrapSandbox,
) -> None:
    await sh(linux, "open('secret.txt', 'w').write('s3cret')", session="victim")
    await sh(linux, "print('hi')", session="attacker")
    victim, attacker = linux.workspace("victim"), linux.workspace("attacker")
    v_uid, a_uid = victim.stat().st_uid, attacker.stat().st_uid
    assert v_uid != a_uid and 0 not in (v_uid, a_uid)
    assert (victim / "secret.txt").read_text() == "s3cret"  # the target exists
    # As the attacker's host user, outside every namespace (what an escape would give):
    probe = subprocess.run(
        ["cat", str(victim / "secret.txt")], user=a_uid, group=a_uid, extra_groups=[],
        capture_output=True, text=True,
    )
    assert probe.returncode != 0 and "s3cret" not in probe.stdout
    listing = subprocess.run(["ls", str(victim)], user=a_uid, group=a_uid, extra_groups=[],
                             capture_output=True, text=True)
    assert listing.returncode != 0 and "secret" not in listing.stdout
    sysctl = subprocess.run(["sh", "-c", "echo x > /proc/sys/fs/file-max"], user=a_uid,
                            group=a_uid, extra_groups=[], capture_output=True, text=True)
    assert "Permission denied" in sysctl.stderr


@as_root
def test_a_uid_is_reused_only_after_its_sessions_files_are_gone(tmp_path: Path) -> None:
    ids = SessionIdentities(tmp_path / "registry", 300_000, 300_001)
    a, b, c = (tmp_path / name for name in ("a", "b", "c"))
    for ws in (a, b, c):
        ws.mkdir()
    uid_a, uid_b = ids.claim(a)[0], ids.claim(b)[0]
    assert {uid_a, uid_b} == {300_000, 300_001}
    with pytest.raises(SandboxUnavailable, match="no free session uid"):
        ids.claim(c)
    ids.free(a, uid_a)  # files still there: not freed
    with pytest.raises(SandboxUnavailable):
        ids.claim(c)
    a.rmdir()
    ids.free(a, uid_a)
    assert ids.claim(c)[0] == uid_a
    # A crashed process never freed b: once b's files are gone, the sweep reclaims it.
    b.rmdir()
    d = tmp_path / "d"
    d.mkdir()
    assert ids.claim(d)[0] == uid_b


@as_root
def test_adopting_a_root_owned_workspace_never_follows_its_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    (outside / "host-file").write_text("x")
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "f").write_text("y")
    (ws / "link-dir").symlink_to(outside)
    (ws / "sub" / "link-file").symlink_to(outside / "host-file")
    uid, gid = SessionIdentities(tmp_path / "reg", 300_100, 300_110).claim(ws)
    assert (ws / "sub" / "f").stat().st_uid == uid
    assert os.lstat(ws / "link-dir").st_uid == uid
    assert outside.stat().st_uid == 0 and (outside / "host-file").stat().st_uid == 0
    assert outside.stat().st_mode & 0o777 == 0o700


async def test_doctor_names_the_identity_sandboxes_run_as(linux: BwrapSandbox) -> None:
    identity = linux.health().details["sandbox_identity"]
    if os.geteuid() == 0:
        assert "per-session unprivileged host uid" in identity
    else:
        assert f"host uid {os.getuid()}" in identity


async def test_the_sandbox_user_can_reopen_its_own_stdio(linux: BwrapSandbox) -> None:
    """Tools read /dev/stdin or write /dev/stdout by name (bash -n /dev/stdin, tee)."""
    request = ExecRequest(session_id="stdio", argv=("/bin/sh", "-c",
                          "cat /dev/stdin; echo out > /dev/stdout; echo err > /dev/stderr"),
                          stdin=b"from stdin\n")
    r = await linux.execute(request)
    assert r.ok, r.stderr
    assert r.stdout == "from stdin\nout\n" and r.stderr == "err\n"


@as_root
async def test_two_backends_sharing_a_home_keep_the_run_dirs_private(sec_home: Path) -> None:
    """A server and a worker on one home: the first to close unmounts the run tmpfs; the
    other mounts it again at its next spawn, so no host path leaks into its sandboxes."""
    sandbox = SandboxSettings(backend="linux", pool_size=0, disk_mb=DISK_MB, timeout_s=20)
    settings = load_settings(home=sec_home / "shared-home", sandbox=sandbox)
    first, second = BwrapSandbox(settings), BwrapSandbox(settings)
    try:
        await sh(first, "print(1)", session="one")
        await first.close()
        r = await sh(second, "print(open('/proc/self/mountinfo').read())", session="two")
        assert r.ok and "onebox-run" in r.stdout
        assert str(second.state_dir) not in r.stdout and str(settings.home) not in r.stdout
    finally:
        await second.close()


@as_root
async def test_the_process_backend_never_runs_code_as_root_either(tmp_path: Path) -> None:
    from onebox.sandbox.process import ProcessSandbox

    sandbox = SandboxSettings(backend="process", pool_size=0, timeout_s=20)
    backend = ProcessSandbox(load_settings(home=tmp_path / "proc-home", sandbox=sandbox))
    code = "import os; print(os.getuid(), os.getgid(), os.getgroups())\n" + \
        _errno_of_write("/proc/sys/fs/file-max") + "print(open('/dev/stdin').read())"
    try:
        a = await backend.execute(ExecRequest(session_id="a", code=code, stdin=b"in"))
        b = await backend.execute(ExecRequest(session_id="b", code=code, stdin=b"in"))
    finally:
        await backend.close()
    (uid_a, gid_a, groups_a), (uid_b, _, _) = (r.stdout.split(maxsplit=2) for r in (a, b))
    assert a.ok and b.ok, a.stderr + b.stderr
    lo, hi = sandbox.session_uid_min, sandbox.session_uid_max
    assert lo <= int(uid_a) <= hi and uid_a == gid_a and uid_a != uid_b
    assert groups_a.startswith("[]")
    assert "EACCES" in a.stdout and a.stdout.rstrip().endswith("in")


@as_root
async def test_the_process_backend_skips_an_interpreter_session_users_cannot_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """root's PATH may start with a shim in a private directory (pyenv under a 0700 /root):
    the session uid must be given a python3 it can run, not a 126 'Permission denied'."""
    from onebox.sandbox.process import ProcessSandbox

    private = tmp_path / "private" / "shims"
    private.mkdir(parents=True)
    (private / "python3").symlink_to(sys.executable)
    os.chmod(private.parent, 0o700)
    monkeypatch.setenv("PATH", f"{private}:{os.environ['PATH']}")
    assert shutil.which("python3") == str(private / "python3")  # the probe is first on PATH
    sandbox = SandboxSettings(backend="process", pool_size=0, timeout_s=20)
    backend = ProcessSandbox(load_settings(home=tmp_path / "proc-home", sandbox=sandbox))
    try:
        r = await backend.execute(ExecRequest(session_id="a", code="import sys; print(sys.executable)"))
    finally:
        await backend.close()
    assert r.ok, r.stderr
    assert not r.stdout.startswith(str(private))


@as_root
def test_a_host_account_in_the_range_is_never_given_to_a_session(tmp_path: Path) -> None:
    import pwd

    root_like = pwd.getpwnam("nobody").pw_uid  # an account every host has
    ids = SessionIdentities(tmp_path / "registry", root_like - 1, root_like + 1)
    given = set()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        given.add(ids.claim(tmp_path / name)[0])
    assert given == {root_like - 1, root_like + 1}
    (tmp_path / "c").mkdir()
    with pytest.raises(SandboxUnavailable):
        ids.claim(tmp_path / "c")
