"""The ``process`` backend: the portable fallback with NO isolation.

For macOS and machines without user namespaces. Code runs as the current user
(as root: the session's own unprivileged uid, as in the linux backend) in its own
session and process group, in the session's workspace directory as cwd, with a
clean environment and rlimits (address space, CPU seconds, file size, processes,
core dumps). It cannot hide host files, block the network or catch processes that
leave the process group; it says so as ``isolation="none"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onebox.config import Settings
from onebox.errors import PolicyViolation
from onebox.sandbox import homes, policy
from onebox.sandbox.base import ExecRequest, ExecResult, Health, OutputSink, SandboxBackend
from onebox.sandbox.capture import BoundedCapture
from onebox.sandbox.identity import (
    Owner,
    ensure_reachable,
    identities_for,
    make_run_dir,
)
from onebox.sandbox.sessions import SessionTable
from onebox.sandbox.workspace import Changes, changes_since, state, write_files

RUSAGE_KB = 1 if sys.platform.startswith("linux") else 1 / 1024


def _open_to_others(path: str) -> bool:
    """Whether a session uid (neither owner nor group) can run ``path``: every directory on
    the way to it and to what its links resolve to is searchable, the file readable and
    executable by others. A pyenv shim under a 0700 /root is on root's PATH but not theirs."""
    try:
        real = Path(os.path.realpath(path))
        for part in {*Path(path).parents, *real.parents}:
            if not os.stat(part).st_mode & 0o001:
                return False
        return os.stat(real).st_mode & 0o005 == 0o005
    except OSError:
        return False


def _runnable(name: str, *fallbacks: str) -> str:
    """The first ``name`` on PATH (then ``fallbacks``) a session uid can run; if none can,
    the first found, so the exec fails with the kernel's own 126 and the path it refused."""
    found = [p for d in os.get_exec_path() if (p := shutil.which(name, path=d))]
    found += [f for f in fallbacks if f and os.path.isfile(f)]
    return next((p for p in found if _open_to_others(p)), found[0] if found else name)


def _interpreters() -> dict[str, str]:
    return {
        "python": _runnable("python3", sys.executable, "/usr/bin/python3"),
        "bash": _runnable("bash", "/bin/sh"),
        "node": _runnable("node"),
    }


def _limit_child(limits: policy.ResolvedLimits) -> None:
    """Runs in the child between fork and exec: only setrlimit calls."""
    values = {
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_FSIZE: limits.disk_mb * 1024 * 1024,
        resource.RLIMIT_CPU: int(limits.timeout_s) + 1,
        resource.RLIMIT_AS: max(limits.memory_mb, 256) * 1024 * 1024 * 4,
        resource.RLIMIT_NPROC: limits.pids * 4,
    }
    for res, value in values.items():
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(res, (value, value))


class ProcessSandbox(SandboxBackend):
    """Runs requests as plain child processes of onebox. No isolation: say so loudly."""

    name = "process"
    isolation = "none"
    supports_network = False

    def __init__(self, settings: Settings, fallback_reason: str | None = None) -> None:
        self.settings = settings
        self.cfg = settings.sandbox
        self.fallback_reason = fallback_reason
        self.identities = identities_for(self.cfg)
        self.run_root = settings.sandbox_dir / "process-run"
        self.run_root.mkdir(parents=True, exist_ok=True)
        homes.start(settings.sandbox_dir, settings.home, self.identities)  # of deleted homes
        settings.workspaces_dir.mkdir(parents=True, exist_ok=True)
        if self.identities.per_session:
            ensure_reachable(self.run_root)
            os.chmod(settings.workspaces_dir, 0o711)
        self.sessions = SessionTable(
            settings.workspaces_dir, self.cfg.idle_timeout_s, self._make_ws, self._drop_ws
        )
        self._groups: dict[str, set[int]] = {}

    def workspace(self, session_id: str) -> Path:
        return self.sessions.path(session_id)

    def live_sessions(self) -> int:
        return self.sessions.live()

    async def _make_ws(self, path: Path) -> None:
        path.mkdir(mode=0o700, exist_ok=True)
        await asyncio.to_thread(self.identities.claim, path)

    async def _drop_ws(self, path: Path) -> None:
        uids = await asyncio.to_thread(self.identities.uids_of, path)
        await asyncio.to_thread(shutil.rmtree, path, True)
        await asyncio.to_thread(self.identities.free_removed, path, uids)

    def _run_as(self, workspace: Path) -> Owner | None:
        return self.identities.owner_of(workspace) if self.identities.per_session else None

    def health(self) -> Health:
        problems = ["the 'process' backend has NO isolation: code can read host files, use "
                    "the network and signal your processes; use the linux backend "
                    "(install bubblewrap, enable user namespaces)"]  # fmt: skip
        if self.fallback_reason:
            problems.append(f"linux backend unavailable: {self.fallback_reason}")
        details = {"live_sessions": self.live_sessions(), "limits": "rlimits only",
                   "sandbox_identity": self.identities.info().describe()}
        return Health(True, self.name, self.isolation, details, tuple(problems))

    def interrupt(self, session_id: str) -> int:
        groups = list(self._groups.get(session_id, ()))
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        return len(groups)

    async def cleanup(self, session_id: str) -> None:
        for pgid in list(self._groups.get(session_id, ())):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        await self.sessions.remove(session_id)

    async def close(self) -> None:
        for groups in self._groups.values():
            for pgid in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
        await self.sessions.close()
        self.identities.close()

    def _command(self, request: ExecRequest, run_dir: Path) -> list[str]:
        argv, entry = policy.command_for(request)
        if entry is None or request.code is None:
            return argv
        (run_dir / entry).write_text(request.code)
        return [_interpreters()[request.language], str(run_dir / entry)]

    async def execute(self, request: ExecRequest) -> ExecResult:
        if request.network.enabled:
            raise PolicyViolation(
                "the process backend cannot restrict network access; use the linux backend",
                field="network.allow_domains",
            )
        limits = policy.resolve_limits(self.cfg, request.limits)
        session, reset = await self.sessions.acquire(request.session_id)
        run_dir = self.run_root / uuid.uuid4().hex[:16]
        run_as = self._run_as(session.path)
        make_run_dir(run_dir, run_as[1] if run_as else None)
        try:
            await asyncio.to_thread(write_files, session.path, request.files, run_as)
            before = await state(session.path)
            argv = self._command(request, run_dir)
            env = policy.sandbox_env(request, limits, proxy=False)
            env["HOME"] = str(session.path)
            result = await self._spawn(request, limits, argv, env, session.path, run_as)
            changes = await changes_since(session.path, before)
        finally:
            self.sessions.release(session)
            shutil.rmtree(run_dir, ignore_errors=True)
        return self._result(result, limits, changes, reset)

    async def _spawn(
        self, request: ExecRequest, limits: policy.ResolvedLimits, argv: list[str],
        env: dict[str, str], cwd: Path, run_as: Owner | None,
    ) -> _Run:  # fmt: skip
        try:
            proc = _popen_owned(argv, run_as, cwd=cwd, env=env, start_new_session=True,
                                preexec_fn=lambda: _limit_child(limits))  # noqa: PLW1509
        except OSError as exc:  # like a shell: 127 not found, 126 not executable
            return _not_started(argv[0], exc, limits)
        groups = self._groups.setdefault(request.session_id, set())
        groups.add(proc.pid)
        try:
            return await _supervise(proc, request.stdin, limits, request.on_output)
        finally:
            groups.discard(proc.pid)

    def _result(
        self,
        run: _Run,
        limits: policy.ResolvedLimits,
        changes: Changes,
        reset: bool,
    ) -> ExecResult:
        error = None
        if run.timed_out:
            error = f"timed out after {limits.timeout_s} s; the process group was killed"
        return ExecResult(
            ok=run.exit_code == 0 and not run.timed_out, exit_code=run.exit_code,
            stdout=run.out.text(), stderr=run.err.text() + (f"\n[onebox] {error}" if error else ""),
            stdout_bytes=run.out.data(),
            stderr_bytes=run.err.data() + (f"\n[onebox] {error}".encode() if error else b""),
            duration_ms=round(run.duration_ms, 3), timed_out=run.timed_out,
            truncated=run.out.truncated or run.err.truncated,
            memory_peak_mb=run.maxrss_mb, cpu_time_ms=run.cpu_ms, files_written=changes.files,
            files_truncated=changes.truncated, session_reset=reset, backend=self.name,
            isolation=self.isolation,
            enforcement={
                "memory": "RLIMIT_AS (4x the limit: address space, not resident memory)",
                "cpu": "RLIMIT_CPU", "pids": "RLIMIT_NPROC (per user, not per call)",
                "disk": "RLIMIT_FSIZE per file", "timeout": "SIGKILL of the process group",
                "filesystem": "none", "network": "none (not restricted)",
                "memory_peak": "ru_maxrss of the largest waited-for process",
            },
            error=error,
        )  # fmt: skip


def _popen_owned(argv: list[str], run_as: Owner | None, **options: Any) -> subprocess.Popen[bytes]:
    """Popen as ``run_as`` (no supplementary groups), with stdio pipes that belong to it, so
    the code can reopen /dev/stdin."""
    pipes = [os.pipe() for _ in range(3)]
    child = (pipes[0][0], pipes[1][1], pipes[2][1])
    try:
        if run_as is not None:
            options.update(user=run_as[0], group=run_as[1], extra_groups=[])
            for fd in child:
                os.fchown(fd, *run_as)
        proc = subprocess.Popen(argv, stdin=child[0], stdout=child[1], stderr=child[2],
                                **options)
    except BaseException:
        for fd in (pipes[0][1], pipes[1][0], pipes[2][0]):
            os.close(fd)
        raise
    finally:
        for fd in child:
            os.close(fd)
    proc.stdin = os.fdopen(pipes[0][1], "wb")
    proc.stdout = os.fdopen(pipes[1][0], "rb")
    proc.stderr = os.fdopen(pipes[2][0], "rb")
    return proc


class _Run:
    def __init__(self, limit: int) -> None:
        self.out = BoundedCapture(limit)
        self.err = BoundedCapture(limit)
        self.exit_code: int | None = None
        self.timed_out = False
        self.duration_ms = 0.0
        self.maxrss_mb: float | None = None
        self.cpu_ms: float | None = None


def _not_started(program: str, exc: OSError, limits: policy.ResolvedLimits) -> _Run:
    run = _Run(limits.max_output_bytes)
    run.exit_code = 127 if isinstance(exc, FileNotFoundError) else 126
    run.err.feed(f"{program}: {exc.strerror}\n".encode())
    return run


def _pump(stream: object, capture: BoundedCapture, emit: Callable[[bytes], None]) -> None:
    read = stream.read1  # type: ignore[attr-defined]
    while chunk := read(65536):
        capture.feed(chunk)
        emit(chunk)


def _emitter(loop: asyncio.AbstractEventLoop, name: str,
             on_output: OutputSink | None) -> Callable[[bytes], None]:
    """From a pump thread, hand each chunk to ``on_output`` on the event loop."""
    def emit(chunk: bytes) -> None:
        if on_output is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(on_output, name, chunk)

    return emit


async def _supervise(
    proc: subprocess.Popen[bytes], stdin: bytes | None, limits: policy.ResolvedLimits,
    on_output: OutputSink | None = None,
) -> _Run:
    """Threads pump the pipes and wait4() the child (for its rusage); we enforce the timeout."""
    run = _Run(limits.max_output_bytes)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[int, object]] = loop.create_future()
    started = time.monotonic()

    def wait() -> None:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        loop.call_soon_threadsafe(done.set_result, (proc.returncode, usage))

    pumps = [threading.Thread(target=_pump, args=(s, c, _emitter(loop, n, on_output)),
                              daemon=True)
             for s, c, n in ((proc.stdout, run.out, "stdout"),
                             (proc.stderr, run.err, "stderr"))]  # fmt: skip
    for thread in [*pumps, threading.Thread(target=wait, daemon=True)]:
        thread.start()
    threading.Thread(target=_feed, args=(proc, stdin), daemon=True).start()
    try:
        code, usage = await asyncio.wait_for(asyncio.shield(done), limits.timeout_s)
    except TimeoutError:
        run.timed_out = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        code, usage = await done
    run.duration_ms = (time.monotonic() - started) * 1000
    await asyncio.to_thread(_join, pumps)
    run.exit_code = code if code >= 0 else 128 - code
    run.maxrss_mb = round(usage.ru_maxrss * RUSAGE_KB / 1024, 2)  # type: ignore[attr-defined]
    run.cpu_ms = round((usage.ru_utime + usage.ru_stime) * 1000, 2)  # type: ignore[attr-defined]
    return run


def _feed(proc: subprocess.Popen[bytes], data: bytes | None) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, OSError):
        if data:
            proc.stdin.write(data)
        proc.stdin.close()


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(timeout=5.0)
    if any(t.is_alive() for t in threads):
        return
