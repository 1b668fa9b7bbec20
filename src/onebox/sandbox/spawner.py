"""Spawn a bubblewrap sandbox blocked before exec, then release it, stream it, time it, kill it.

Two phases so that the expensive part can happen ahead of time (the pool):

1. :func:`spawn_blocked` starts bwrap with ``--block-fd``/``--info-fd``. bwrap
   creates the namespaces and mounts, then waits; we learn the pid of the
   sandbox's init (pid 1 inside) from the info fd.
2. :func:`release` unblocks it, feeds stdin, drains stdout/stderr into bounded
   captures and waits up to the timeout. On timeout the sandbox's init is
   SIGKILLed, which makes the kernel kill every process of its pid namespace:
   nothing outlives the call, not even double-forked daemons.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from onebox.errors import SandboxUnavailable
from onebox.sandbox.capture import BoundedCapture, drain

if TYPE_CHECKING:
    from onebox.sandbox.egress import ExecutionEgress

INFO_TIMEOUT_S = 10.0


@dataclass(eq=False)
class Blocked:
    """A sandbox whose namespaces exist and whose command has not started yet."""

    proc: asyncio.subprocess.Process
    child_pid: int
    block_w: int
    spawned_at: float = field(default_factory=time.monotonic)
    tag: str = ""
    egress: ExecutionEgress | None = None

    def discard(self) -> None:
        """Kill it without running anything."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.child_pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(OSError):
            os.close(self.block_w)


@dataclass
class Outcome:
    exit_code: int | None
    stdout: BoundedCapture
    stderr: BoundedCapture
    duration_ms: float
    timed_out: bool


@dataclass(frozen=True)
class SpawnFds:
    """Descriptors bwrap must inherit; the pipes are created by :func:`make_pipes`."""

    block_r: int
    block_w: int
    info_r: int
    info_w: int
    extra: tuple[int, ...] = ()


def make_pipes(extra: Sequence[int] = ()) -> SpawnFds:
    block_r, block_w = os.pipe()
    info_r, info_w = os.pipe()
    return SpawnFds(block_r, block_w, info_r, info_w, tuple(extra))


def _args_fd(options: Sequence[str]) -> int:
    fd = os.memfd_create("onebox-bwrap-args", os.MFD_CLOEXEC)
    os.write(fd, b"".join(opt.encode() + b"\0" for opt in options))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def spawn_blocked(
    bwrap: str, options: Sequence[str], command: Sequence[str], fds: SpawnFds
) -> Blocked:
    """Start bwrap with its options passed via ``--args FD`` and a minimal environment.

    Both would otherwise be visible inside as ``/proc/1/cmdline`` and ``/proc/1/environ``.
    """
    args_fd = _args_fd(options)
    try:
        proc = await asyncio.create_subprocess_exec(
            bwrap,
            "--args",
            str(args_fd),
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(fds.block_r, fds.info_w, args_fd, *fds.extra),
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            start_new_session=True,
        )
    finally:
        for fd in (fds.block_r, fds.info_w, args_fd):
            os.close(fd)
    try:
        child_pid = await _read_child_pid(fds.info_r, proc)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        os.close(fds.block_w)
        raise
    return Blocked(proc, child_pid, fds.block_w)


async def _read_child_pid(info_r: int, proc: asyncio.subprocess.Process) -> int:
    loop = asyncio.get_running_loop()
    buf = bytearray()
    os.set_blocking(info_r, False)
    done: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        try:
            chunk = os.read(info_r, 4096)
        except BlockingIOError:
            return
        buf.extend(chunk)
        if (not chunk or b"}" in chunk) and not done.done():
            done.set_result(None)

    loop.add_reader(info_r, on_readable)
    try:
        await asyncio.wait_for(done, INFO_TIMEOUT_S)
    finally:
        loop.remove_reader(info_r)
        os.close(info_r)
    try:
        return int(json.loads(bytes(buf))["child-pid"])
    except (ValueError, KeyError) as exc:
        raise SandboxUnavailable(await _startup_error(proc)) from exc


async def _startup_error(proc: asyncio.subprocess.Process) -> str:
    err = b""
    if proc.stderr is not None:
        with contextlib.suppress(asyncio.TimeoutError):
            err = await asyncio.wait_for(proc.stderr.read(4096), 2.0)
    text = err.decode(errors="replace").strip() or "no message"
    return f"bubblewrap could not start the sandbox: {text}. Run `onebox doctor`."


async def release(
    blocked: Blocked, stdin: bytes | None, timeout_s: float, max_output_bytes: int
) -> Outcome:
    """Run the blocked sandbox to completion or timeout; output capped head + tail."""
    proc = blocked.proc
    assert proc.stdout is not None and proc.stderr is not None
    out, err = BoundedCapture(max_output_bytes), BoundedCapture(max_output_bytes)
    started = time.monotonic()
    os.write(blocked.block_w, b"1")
    os.close(blocked.block_w)
    feeder = asyncio.create_task(_feed(proc, stdin))
    readers = asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err))
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), timeout_s)
    except TimeoutError:
        timed_out = True
        kill_tree(blocked)
        await proc.wait()
    except BaseException:
        kill_tree(blocked)
        raise
    finally:
        await _finish_io(readers, feeder)
    duration_ms = (time.monotonic() - started) * 1000
    return Outcome(proc.returncode, out, err, duration_ms, timed_out)


def kill_tree(blocked: Blocked) -> None:
    """SIGKILL the sandbox's pid 1 (the kernel then kills its whole pid namespace) and bwrap."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(blocked.child_pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        blocked.proc.kill()


async def _feed(proc: asyncio.subprocess.Process, data: bytes | None) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            proc.stdin.write(data)
            await proc.stdin.drain()
    proc.stdin.close()


async def _finish_io(
    readers: asyncio.Future[tuple[None, None]], feeder: asyncio.Task[None]
) -> None:
    """Output pipes close when the pid namespace is gone; never wait forever on them."""
    try:
        await asyncio.wait_for(readers, 5.0)
    except TimeoutError:
        readers.cancel()
    feeder.cancel()
    with contextlib.suppress(asyncio.CancelledError, BrokenPipeError, ConnectionResetError):
        await feeder
