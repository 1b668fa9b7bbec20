"""One session's long-lived python interpreter in a sandbox of its own (host side).

Spawned with the backend's own ``spawn()`` (the same bubblewrap policy, seccomp, its own
cgroup with the starting call's limits, the session's uid, the environment layer, egress
per the network policy), it runs ``interp_server.py`` with ``/usr/bin/python3 -I``. The
host listens on a unix socket in the run directory (seen inside as
``/run/onebox/interp.sock``) and accepts exactly one connection: the frames of
``interpreter_protocol.py``. The sandbox's stdout and stderr pipes carry the user's
prints (and raw writes of subprocesses) and are streamed to ``on_output`` as they come;
before each frame they are drained, so output and results keep their order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

from onebox.errors import SandboxError
from onebox.sandbox import policy
from onebox.sandbox.base import CellError, CellOutput, CellRequest, ExecRequest, OutputSink
from onebox.sandbox.capture import CHUNK_BYTES, BoundedCapture
from onebox.sandbox.interpreter_protocol import (
    Done,
    FrameReader,
    ProtocolViolation,
    Ready,
    encode,
)
from onebox.sandbox.linux_support import write_command
from onebox.sandbox.spawner import Blocked, kill_tree

if TYPE_CHECKING:
    from onebox.sandbox.bwrap_host import BwrapHost
    from onebox.sandbox.sessions import Session

PYTHON = "/usr/bin/python3"
SERVER = "interp_server.py"
SOCKET = "interp.sock"
ARGV = (PYTHON, "-I", f"{policy.RUN_DIR}/{SERVER}")
STARTUP_TIMEOUT_S = 30.0
LOST = "variables and imports are gone"
ACK = encode({"op": "ack"})


@dataclass
class CellRun:
    """What one call produced, filled as frames and output arrive."""

    limit_bytes: int
    on_output: OutputSink | None = None
    on_result: object = None
    stdout: BoundedCapture = field(init=False)
    stderr: BoundedCapture = field(init=False)
    results: list[CellOutput] = field(default_factory=list)
    error: CellError | None = None
    count: int = 0
    timed_out: bool = False
    lost: str | None = None  # why the interpreter died during the call, in words

    def __post_init__(self) -> None:
        self.stdout = BoundedCapture(self.limit_bytes)
        self.stderr = BoundedCapture(self.limit_bytes)


def settings_key(request: CellRequest, limits: policy.ResolvedLimits) -> dict[str, object]:
    """What a running interpreter was started with; a call that differs restarts it."""
    return {
        "network policy": request.network.allow_domains,
        "environment": None if request.environment is None else
        (request.environment.name, request.environment.version, request.environment.sha256),
        "memory limit": limits.memory_mb, "cpu limit": limits.cpus, "pids limit": limits.pids,
        "disk limit": limits.disk_mb, "environment variables": tuple(sorted(request.env.items())),
    }  # fmt: skip


class SandboxInterpreter:
    """A running interpreter; ``run`` one cell at a time (the caller serializes)."""

    def __init__(self, backend: BwrapHost, blocked: Blocked, session: Session,
                 key: dict[str, object]) -> None:
        self.backend, self.blocked, self.key = backend, blocked, key
        self.identity = session.identity
        self.connected: asyncio.Future[FrameReader] = asyncio.get_running_loop().create_future()
        self.writer: asyncio.StreamWriter | None = None
        self.server: asyncio.AbstractServer | None = None
        self.cell: CellRun | None = None
        self.startup = BoundedCapture(64 * 1024)
        self.kill_reason: str | None = None
        self.stopped = False

    @classmethod
    async def start(cls, backend: BwrapHost, request: CellRequest,
                    limits: policy.ResolvedLimits, session: Session) -> SandboxInterpreter:
        exec_request = ExecRequest(
            session_id=request.session_id, argv=ARGV, env={"MPLBACKEND": "Agg", **request.env},
            limits=request.limits, network=request.network, trace_id=request.trace_id,
            environment=request.environment)
        blocked = await backend.spawn(session.path, limits, exec_request)
        interp = cls(backend, blocked, session, settings_key(request, limits))
        try:
            await interp._launch(exec_request, limits)
        except BaseException:
            await interp.stop()
            raise
        return interp

    async def _launch(self, request: ExecRequest, limits: policy.ResolvedLimits) -> None:
        run_dir = self.backend.run_root / self.blocked.tag
        source = resources.files("onebox.sandbox").joinpath(SERVER).read_text()
        _write(run_dir / SERVER, source)
        self.server = await asyncio.start_unix_server(self._on_connect, path=str(run_dir / SOCKET))
        os.chmod(run_dir / SOCKET, 0o666)
        proxy = self.blocked.egress is not None
        env = policy.sandbox_env(request, limits, proxy=proxy)
        rlimits = [line for line in policy.rlimit_lines(
            limits, cgroups=self.backend.cgroups is not None) if not line.startswith("ulimit -t")]
        write_command(run_dir, request, list(ARGV), env, proxy, rlimits)
        self._watch_output()
        os.close(self.blocked.stdin_w)  # the server reads /dev/null; frames come by socket
        self.blocked.stdin_w = -1
        os.write(self.blocked.block_w, b"1")
        os.close(self.blocked.block_w)
        self.blocked.block_w = -1
        await self._await_ready()

    async def _await_ready(self) -> None:
        try:
            frames = await asyncio.wait_for(asyncio.shield(self.connected), STARTUP_TIMEOUT_S)
            frame = await asyncio.wait_for(frames.read(), STARTUP_TIMEOUT_S)
        except (TimeoutError, EOFError, ProtocolViolation) as exc:
            self._drain()
            detail = self.startup.text().strip()[-2000:] or "no output"
            raise SandboxError(f"the interpreter did not start ({exc or 'timeout'}): "
                               f"{detail}") from exc
        if not isinstance(frame, Ready):
            raise SandboxError("the interpreter did not start: its first frame was not 'ready'")

    def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.connected.done():  # exactly one connection: the server's
            writer.close()
            return
        self.writer = writer
        self.connected.set_result(FrameReader(reader))
        if self.server is not None:
            self.server.close()
        with contextlib.suppress(OSError):
            (self.backend.run_root / self.blocked.tag / SOCKET).unlink()

    # -- output ----------------------------------------------------------------

    def _watch_output(self) -> None:
        loop = asyncio.get_running_loop()
        for fd, stream in ((self.blocked.stdout_r, "stdout"), (self.blocked.stderr_r, "stderr")):
            loop.add_reader(fd, self._read_one, fd, stream)

    def _read_one(self, fd: int, stream: str) -> bool:
        """Read one chunk of ``stream``; False when there was nothing to read."""
        try:
            chunk = os.read(fd, CHUNK_BYTES)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            asyncio.get_running_loop().remove_reader(fd)
            return False
        cell = self.cell
        if cell is None:
            self.startup.feed(chunk)  # before the first call (or between calls): kept aside
            return True
        (cell.stdout if stream == "stdout" else cell.stderr).feed(chunk)
        if cell.on_output is not None:
            cell.on_output(stream, chunk)
        return True

    def _drain(self) -> None:
        """Everything already in the pipes, now (called before each frame is handled)."""
        for fd, stream in ((self.blocked.stdout_r, "stdout"), (self.blocked.stderr_r, "stderr")):
            while fd >= 0 and self._read_one(fd, stream):
                pass

    # -- one call ----------------------------------------------------------------

    async def run(self, request: CellRequest, limits: policy.ResolvedLimits) -> CellRun:
        cell = CellRun(limits.max_output_bytes, request.on_output, request.on_result)
        self.cell = cell
        frames = self.connected.result()
        frames.new_call()
        try:
            assert self.writer is not None
            self.writer.write(encode({"op": "run", "code": request.code}))
            await asyncio.wait_for(self._collect(frames, cell), limits.timeout_s)
        except TimeoutError:
            cell.timed_out = True
            self._die(cell, f"it ran past its {limits.timeout_s:g} s timeout")
        except ProtocolViolation as exc:
            self._die(cell, f"it broke the interpreter protocol: {exc}")
        except (EOFError, ConnectionError):
            self._die(cell, await self._death_cause(limits))
        except BaseException:
            self._die(cell, "the call was cancelled")
            raise
        finally:
            self._drain()
            self.cell = None
        return cell

    async def _collect(self, frames: FrameReader, cell: CellRun) -> None:
        while True:
            frame = await frames.read()
            self._drain()
            if isinstance(frame, Done):
                cell.count = frame.count
                return
            if isinstance(frame, CellError):
                cell.error = frame
            elif isinstance(frame, CellOutput):
                cell.results.append(frame)
                if callable(cell.on_result):
                    cell.on_result(frame)
                if not frame.is_main_result and self.writer is not None:
                    self.writer.write(ACK)  # the server waits: later prints come after it
            else:
                raise ProtocolViolation("it sent 'ready' in the middle of a call")

    def _die(self, cell: CellRun, cause: str) -> None:
        self.kill(self.kill_reason or cause)
        cell.lost = f"the interpreter was killed: {self.kill_reason}; {LOST}"

    async def _death_cause(self, limits: policy.ResolvedLimits) -> str:
        if self.kill_reason is not None:
            return self.kill_reason
        usage = self.backend._usage(self.blocked.tag)
        if usage.oom_killed:
            return f"it ran out of memory (limit {limits.memory_mb} MB)"
        with contextlib.suppress(TimeoutError, ChildProcessError):
            code = await asyncio.wait_for(asyncio.to_thread(self.blocked.proc.wait), 2.0)
            return f"it exited unexpectedly (exit code {code})"
        return "it exited unexpectedly"

    def memory_peak_mb(self) -> float | None:
        return self.backend._usage(self.blocked.tag).memory_peak_mb

    def reset_peak(self) -> None:
        if self.backend.cgroups is not None:
            self.backend.cgroups.reset_peak(self.blocked.tag)

    # -- the end -------------------------------------------------------------------

    def kill(self, reason: str) -> None:
        """SIGKILL the interpreter's whole sandbox now (the kernel kills its pid namespace)."""
        if self.kill_reason is None:
            self.kill_reason = reason
        kill_tree(self.blocked)

    async def stop(self, reason: str = "it was stopped") -> None:
        """Kill it and release all it holds (pipes, socket, egress, cgroup, run dir)."""
        if self.stopped:
            return
        self.stopped = True
        self.kill(reason)
        loop = asyncio.get_running_loop()
        for fd in (self.blocked.stdout_r, self.blocked.stderr_r):
            with contextlib.suppress(OSError, ValueError):
                loop.remove_reader(fd)
        if self.server is not None:
            self.server.close()
        if self.writer is not None:
            self.writer.close()
        await asyncio.to_thread(self.blocked.discard)
        await self.backend.discard(self.blocked)


def _write(path: os.PathLike[str], text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
