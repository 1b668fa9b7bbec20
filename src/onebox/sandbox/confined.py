"""One-shot confined child processes for work on untrusted bytes (document parsers).

    result = await run_confined([sys.executable, "-I", "-B", script, ...], data, limits,
                                extra_ro=(script,))

The command runs in a bubblewrap sandbox of its own: new pid, ipc, uts, net, mount (and,
as a normal user, user) namespaces, a read-only view of ``/usr``, ``/etc/ld.so.cache``
and the Python environment onebox runs from (``sys.prefix``, ``sys.base_prefix``) plus
the files named in ``extra_ro``; nothing else of the host (no workspace, no home, no
network), a private size-capped ``/tmp``, the seccomp filter of every sandbox
(``seccomp.filter_fd()``), no capabilities and ``no_new_privs``. ``prlimit`` sets the
rlimits right before the command: address space, CPU seconds, file size, descriptors,
and one process (it cannot fork or start threads).

When onebox runs as root, bwrap is started as root *without* a user namespace (a user
namespace made by root maps to host root) and the command is exec'd through ``setpriv``
as host uid/gid 65534 (nobody) with every capability set cleared: an escape from the
namespaces yields nobody. Binding as root also reaches a Python installed under a
private home (``/root/.pyenv``), which bwrap run as nobody could not.

Input is written to stdin, stdout is captured up to ``max_output_bytes`` (past that the
child is killed), and after ``timeout_s`` the whole process group gets SIGKILL
(bwrap's ``--die-with-parent`` takes the sandbox with it). Without bubblewrap the same
command runs as a plain child with the same identity change, rlimits and timeout, and
:func:`isolation` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from onebox.sandbox import seccomp
from onebox.sandbox.linux_support import probe_bwrap, system_paths

log = logging.getLogger(__name__)

NOBODY = 65534
SYSTEM_RO = ("/usr", "/etc/ld.so.cache")
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
CHUNK_BYTES = 64 * 1024
STDERR_TAIL_BYTES = 4096
MAX_FILES = 64
_SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
_PRLIMIT = shutil.which("prlimit") or "/usr/bin/prlimit"


@dataclass(frozen=True)
class ConfinedLimits:
    timeout_s: float
    memory_mb: int
    max_output_bytes: int
    file_mb: int = 16


@dataclass(frozen=True)
class ConfinedSpec:
    """Everything :func:`compile_argv` needs (pure data, so the argv is unit-testable)."""

    argv: tuple[str, ...]
    limits: ConfinedLimits
    bwrap: str | None
    as_root: bool
    ro_paths: tuple[str, ...] = ()
    symlinks: Mapping[str, str] = field(default_factory=dict)
    seccomp_fd: int | None = None


@dataclass(frozen=True)
class ConfinedResult:
    exit_code: int
    stdout: bytes
    stderr_tail: bytes
    timed_out: bool = False
    output_exceeded: bool = False


# -- compile: pure -------------------------------------------------------------------


def rlimit_argv(limits: ConfinedLimits) -> list[str]:
    """``prlimit`` in front of the command: memory, CPU, file size, fds, no new processes."""
    cpu_s = max(1, int(limits.timeout_s + 0.999))
    return [
        _PRLIMIT, f"--as={limits.memory_mb << 20}", f"--cpu={cpu_s}:{cpu_s + 1}",
        f"--fsize={limits.file_mb << 20}", f"--nofile={MAX_FILES}", "--nproc=1", "--core=0",
        "--",
    ]  # fmt: skip


def identity_argv(as_root: bool) -> list[str]:
    """As root: become nobody with empty capability sets; otherwise stay who we are."""
    if not as_root:
        return []
    return [
        _SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--",
    ]  # fmt: skip


def _namespace_args(as_root: bool) -> list[str]:
    common = ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if not as_root:
        return ["--unshare-all", *common]
    # No user namespace: one created by root maps to host root. setpriv needs these
    # three capabilities to become nobody; it clears them all before the command runs.
    keep = ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", *common, *keep]


def _parent_dirs(paths: Sequence[str]) -> list[str]:
    """Every ancestor of the bind targets, created 0755 (bwrap would make them 0700)."""
    parents: set[str] = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            parents.add(parent)
            parent = os.path.dirname(parent)
    return sorted(parents)


def _mount_args(spec: ConfinedSpec) -> list[str]:
    # /proc, /dev and the private /tmp first: a Python environment that lives under /tmp
    # (a checkout in a temp dir) is bound on top of the tmpfs, not hidden by it.
    tmp_bytes = str(spec.limits.file_mb << 20)
    args = ["--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"]
    for parent in _parent_dirs(spec.ro_paths):
        args += ["--perms", "0755", "--dir", parent]
    for path in spec.ro_paths:
        args += ["--ro-bind", path, path]
    for link, target in spec.symlinks.items():
        args += ["--symlink", target, link]
    return [*args, "--remount-ro", "/"]


def compile_argv(spec: ConfinedSpec) -> list[str]:
    """The whole host argv: bwrap (or nothing), the identity change, the rlimits, the command."""
    inner = [*identity_argv(spec.as_root), *rlimit_argv(spec.limits), *spec.argv]
    if spec.bwrap is None:
        # setpriv execs the rest in the same process, so the death signal stays set.
        return [*identity_argv(spec.as_root), _SETPRIV, "--pdeathsig", "KILL", "--",
                *rlimit_argv(spec.limits), *spec.argv]
    args = [spec.bwrap, *_namespace_args(spec.as_root), *_mount_args(spec)]
    if spec.seccomp_fd is not None:
        args += ["--seccomp", str(spec.seccomp_fd)]
    return [*args, "--chdir", "/", *inner]


def minimal_paths(paths: Sequence[str]) -> tuple[str, ...]:
    """Absolute paths without duplicates or paths already inside another one."""
    clean = sorted({os.path.abspath(p) for p in paths if p})
    kept: list[str] = []
    for path in clean:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return tuple(kept)


# -- the host ---------------------------------------------------------------------------


def host_paths(extra_ro: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """What of the host the child sees: system paths, the Python environment, ``extra_ro``."""
    ro, links = system_paths(SYSTEM_RO)
    ro += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *extra_ro]
    return minimal_paths(ro), links


@functools.cache
def bwrap_path() -> str | None:
    """bubblewrap when it can build a sandbox here (checked once), else None."""
    bwrap = shutil.which("bwrap")
    problems = probe_bwrap(bwrap or "/usr/bin/bwrap")
    if bwrap is None or problems:
        log.warning("document parsers run without a sandbox (rlimits and timeout only): %s",
                    "; ".join(problems) or "bubblewrap not found")
        return None
    return bwrap


def isolation() -> str:
    """How confined children are isolated here (for logs and ``onebox doctor``)."""
    if bwrap_path() is None:
        return "rlimits and timeout only (bubblewrap unavailable)"
    who = "host uid 65534 (nobody)" if os.geteuid() == 0 else f"host uid {os.geteuid()}"
    return f"bubblewrap namespaces + seccomp + rlimits, as {who}"


def build_spec(argv: Sequence[str], limits: ConfinedLimits, extra_ro: Sequence[str],
               seccomp_fd: int | None) -> ConfinedSpec:
    ro, links = host_paths(extra_ro)
    return ConfinedSpec(tuple(argv), limits, bwrap_path(), os.geteuid() == 0, ro, links,
                        seccomp_fd)


# -- run ----------------------------------------------------------------------------


async def run_confined(argv: Sequence[str], data: bytes, limits: ConfinedLimits,
                       extra_ro: Sequence[str] = ()) -> ConfinedResult:
    """Run ``argv`` confined with ``data`` on stdin; never outlives ``limits.timeout_s``."""
    use_seccomp = bwrap_path() is not None and seccomp.available()
    sfd = seccomp.filter_fd() if use_seccomp else None
    try:
        spec = build_spec(argv, limits, extra_ro, sfd)
        proc = await asyncio.create_subprocess_exec(
            *compile_argv(spec), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            pass_fds=(sfd,) if sfd is not None else (), env=ENV, cwd="/",
            start_new_session=True)
    finally:
        if sfd is not None:
            os.close(sfd)
    return await _supervise(proc, data, limits)


async def _supervise(proc: asyncio.subprocess.Process, data: bytes,
                     limits: ConfinedLimits) -> ConfinedResult:
    try:
        async with asyncio.timeout(limits.timeout_s):
            (out, exceeded), err, _ = await asyncio.gather(
                _read_bounded(proc, limits.max_output_bytes), _tail(proc), _feed(proc, data))
            code = await proc.wait()
        return ConfinedResult(code, out, err, output_exceeded=exceeded)
    except TimeoutError:
        _kill_group(proc)
        return ConfinedResult(await proc.wait(), b"", b"", timed_out=True)
    finally:
        if proc.returncode is None:  # cancelled: never leave a parser behind
            _kill_group(proc)
            await proc.wait()
        if proc.stdin is not None:  # a feed cut short leaves it open, and the transport too
            proc.stdin.close()


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _read_bounded(proc: asyncio.subprocess.Process, max_bytes: int) -> tuple[bytes, bool]:
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size = 0
    while chunk := await proc.stdout.read(CHUNK_BYTES):
        size += len(chunk)
        if size > max_bytes:
            _kill_group(proc)
            while await proc.stdout.read(CHUNK_BYTES):  # to EOF, so the pipe closes
                pass
            return b"", True
        chunks.append(chunk)
    return b"".join(chunks), False


async def _tail(proc: asyncio.subprocess.Process) -> bytes:
    assert proc.stderr is not None
    tail = b""
    while chunk := await proc.stderr.read(CHUNK_BYTES):
        tail = (tail + chunk)[-STDERR_TAIL_BYTES:]
    return tail


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.close()
