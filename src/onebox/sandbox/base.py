"""The sandbox interface: what every backend takes and returns.

A backend runs one :class:`ExecRequest` in the workspace of its session and
returns an :class:`ExecResult`. A non-zero exit is data (``ok=False``), not an
exception; :class:`~onebox.errors.SandboxError` means the sandbox itself could
not do its job.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from onebox.errors import CommandFailed, SandboxError


class _Holds(Protocol):
    """What :meth:`SandboxBackend.hold` needs of a backend's session table."""

    def hold(self, session_id: str) -> AbstractAsyncContextManager[None]: ...

Language = Literal["python", "bash", "node"]
# Live output: called on the event loop with ("stdout" | "stderr", bytes) as the code prints,
# never blocking; the result's stdout/stderr stay the complete capture.
OutputSink = Callable[[str, bytes], None]


@dataclass(frozen=True)
class Limits:
    """Resource limits for one execution. None means: the backend's default from Settings."""

    timeout_s: float | None = None
    memory_mb: int | None = None
    cpus: float | None = None
    pids: int | None = None
    disk_mb: int | None = None
    max_output_bytes: int | None = None


@dataclass(frozen=True)
class NetworkPolicy:
    """Default: no network at all. ``allow_domains`` routes traffic through the egress proxy."""

    allow_domains: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.allow_domains)


@dataclass(frozen=True)
class EnvironmentLayer:
    """A built package layer (runtime/environments/service.py builds it): a read-only,
    content-addressed host directory mounted into the sandbox, its packages importable."""

    name: str
    version: int
    path: Path  # host directory of the layer; never written after it is built
    sha256: str
    packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExecRequest:
    """One call into the sandbox: ``code`` in ``language``, or an explicit ``argv``."""

    session_id: str
    code: str | None = None
    language: Language = "python"
    argv: tuple[str, ...] | None = None
    files: Mapping[str, bytes | Path] = field(default_factory=dict)  # a Path: a host file the
    # server staged (an upload), copied in by the kernel, never read whole into memory
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes | None = None
    limits: Limits = field(default_factory=Limits)
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    trace_id: str | None = None
    on_output: OutputSink | None = field(default=None, compare=False, repr=False)
    environment: EnvironmentLayer | None = None
    # The host python's third-party packages visible (policy.HOST_PACKAGE_DIRS): only for
    # onebox's own environment build, which runs the host's pip; never set from a request
    host_python_packages: bool = False


@dataclass(frozen=True)
class FileChange:
    path: str
    change: Literal["created", "modified", "deleted"]
    size: int | None
    sha256: str | None
    note: str | None = None  # why sha256 is None for an existing file (e.g. over the hash bound)


@dataclass(frozen=True)
class BlockedAttempt:
    host: str
    port: int | None
    reason: str
    at: str
    session_id: str = ""


@dataclass(frozen=True)
class ExecResult:
    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: float
    timed_out: bool = False
    truncated: bool = False
    memory_peak_mb: float | None = None
    cpu_time_ms: float | None = None
    files_written: tuple[FileChange, ...] = ()
    blocked_network: tuple[BlockedAttempt, ...] = ()
    session_reset: bool = False
    backend: str = ""
    isolation: str = ""
    enforcement: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    files_truncated: bool = False  # files_written stops at a bound (count, depth, time)
    # The exact bytes printed (stdout/stderr above are their text view: NUL and invalid
    # UTF-8 shown as U+FFFD). None: the str is the output (stdout.encode() gives the bytes).
    stdout_bytes: bytes | None = None
    stderr_bytes: bytes | None = None

    @property
    def cpu_percent(self) -> float | None:
        """CPU time over wall time, in percent of one core (None when not measured)."""
        if self.cpu_time_ms is None or self.duration_ms <= 0:
            return None
        return round(100.0 * self.cpu_time_ms / self.duration_ms, 2)

    @property
    def stdout_raw(self) -> bytes:
        return self.stdout.encode("utf-8", "surrogatepass") if self.stdout_bytes is None \
            else self.stdout_bytes

    @property
    def stderr_raw(self) -> bytes:
        return self.stderr.encode("utf-8", "surrogatepass") if self.stderr_bytes is None \
            else self.stderr_bytes

    def check(self) -> ExecResult:
        """Return self when the execution succeeded, else raise CommandFailed."""
        if not self.ok:
            raise CommandFailed(self)
        return self


@dataclass(frozen=True)
class CellOutput:
    """One rich output of an interpreter call: its representations by MIME type
    (``text/plain``, ``text/html``, ``image/png`` as base64, ``application/json``...)."""

    data: Mapping[str, str]
    is_main_result: bool = False  # the value of the cell's last expression


@dataclass(frozen=True)
class CellError:
    name: str  # the exception's class, e.g. "NameError"
    value: str  # str(exception)
    traceback: str


# Rich outputs as they are produced (a figure shown, a display() call), on the event loop.
ResultSink = Callable[[CellOutput], None]


@dataclass(frozen=True)
class CellRequest:
    """Python code for the session's long-lived interpreter: variables, imports and open
    files persist between calls of the same session."""

    session_id: str
    code: str
    limits: Limits = field(default_factory=Limits)
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    environment: EnvironmentLayer | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    trace_id: str | None = None
    on_output: OutputSink | None = field(default=None, compare=False, repr=False)
    on_result: ResultSink | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class CellResult:
    stdout: str
    stderr: str
    results: tuple[CellOutput, ...]
    error: CellError | None
    execution_count: int
    duration_ms: float
    timed_out: bool = False
    # The interpreter's state (variables, imports) was lost: it was killed (timeout, out of
    # memory, crash) during this call, or restarted before it (its policy changed, it had
    # died, it was reaped). ``restart_reason`` says which, in words a user can act on.
    state_lost: bool = False
    restart_reason: str | None = None
    memory_peak_mb: float | None = None
    files_written: tuple[FileChange, ...] = ()
    truncated: bool = False
    blocked_network: tuple[BlockedAttempt, ...] = ()  # refused by the egress proxy this call

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


@dataclass(frozen=True)
class Health:
    ok: bool
    backend: str
    isolation: str
    details: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


class SandboxBackend(abc.ABC):
    """A place to run untrusted code. Subclasses implement the abstract methods."""

    name: ClassVar[str] = ""
    isolation: ClassVar[str] = "none"
    supports_network: ClassVar[bool] = False
    has_interpreter: ClassVar[bool] = False  # run_cell works (a long-lived interpreter)

    @abc.abstractmethod
    async def execute(self, request: ExecRequest) -> ExecResult:
        """Run the request in its session's workspace and return what happened."""

    @abc.abstractmethod
    async def cleanup(self, session_id: str) -> None:
        """Kill what is left of the session and delete its workspace."""

    @abc.abstractmethod
    def health(self) -> Health:
        """What this backend can enforce on this machine, with fix hints."""

    @abc.abstractmethod
    def workspace(self, session_id: str) -> Path:
        """The host directory that holds the session's workspace (may not exist yet)."""

    async def run_cell(self, request: CellRequest) -> CellResult:
        """Run python in the session's long-lived interpreter (started on first use)."""
        raise SandboxError(f"the {self.name!r} sandbox backend has no stateful interpreter; "
                           "use the linux backend, or run the code stateless (execute)")

    def interrupt(self, session_id: str) -> int:
        """Kill the processes of the session's running executions (their ``execute`` calls
        return, with the output so far); returns how many were running. Backends that
        cannot do this return 0 and their callers cancel instead."""
        return 0

    def local_owner(self) -> str | None:
        """This process as the owner of what it makes for itself under the sandbox dir (a
        session it ends when its call does), in a form :meth:`local_owner_gone` of another
        process reads; None: this backend cannot tell when its owner died."""
        return None

    def local_owner_gone(self, owner: str) -> bool:
        """``owner`` (another process's :meth:`local_owner`) has provably exited, and what
        it left is under this backend's sandbox dir: this process may reclaim it."""
        return False

    def interpreter_lost(self, session_id: str, why: str) -> None:
        """The session's interpreter state was lost outside this backend (the server that
        ran it died, the session moved here): the next ``run_cell`` result says
        ``state_lost`` with ``why``. Backends without an interpreter have nothing to say."""
        return None

    def hold(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Keep executions out of a session (waiting for running ones) while host code
        changes its workspace, e.g. a snapshot restore. Backends with a session table
        (``self.sessions``) get this for free; others hold nothing."""
        sessions: _Holds | None = getattr(self, "sessions", None)
        return contextlib.nullcontext() if sessions is None else sessions.hold(session_id)

    async def close(self) -> None:
        """Release pools, proxies and background tasks. Idempotent."""
        return None

    async def run(self, request: ExecRequest, *, check: bool = False) -> ExecResult:
        result = await self.execute(request)
        return result.check() if check else result
