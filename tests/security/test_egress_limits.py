"""The egress proxy under hostile clients: connection floods, slow clients, smuggling heads.

The test process is the supervisor here: the proxy listens in it, exactly as the linux
backend runs it, while the flooding clients live in other processes (or in a sandbox), so
the file descriptors counted in ``/proc/self/fd`` are the proxy's own.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
from sbx_helpers import sh

from onebox.sandbox.base import ExecRequest, NetworkPolicy
from onebox.sandbox.egress import ACCEPT_BACKLOG, EgressLimits, EgressProxy, ExecutionEgress
from onebox.sandbox.linux import BwrapSandbox

pytestmark = pytest.mark.asyncio(loop_scope="session")

FLOOD = """
import resource, socket, sys
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
path, count, head = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(head)
    except OSError:
        s.close()
        continue
    held.append(s)
print(len(held), flush=True)
sys.stdin.read()
"""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@asynccontextmanager
async def proxy(
    tmp_path: Path, *, limits: EgressLimits | None = None, sessions: int = 1, port: int = 0,
) -> AsyncIterator[tuple[EgressProxy, list[ExecutionEgress]]]:
    """An egress proxy with one listener per session, each allowed localhost:port."""
    egress_proxy = EgressProxy(["127.0.0.1"], limits=limits or EgressLimits())
    listeners = []
    for n in range(sessions):
        run_dir = tmp_path / f"run-{n}"
        run_dir.mkdir()
        request = ExecRequest(session_id=f"s{n}", code="",
                              network=NetworkPolicy(allow_domains=(f"localhost:{port}",)))
        egress = await egress_proxy.open(run_dir, request)
        assert egress is not None
        listeners.append(egress)
    try:
        yield egress_proxy, listeners
    finally:
        await egress_proxy.close()


@contextmanager
def flood(path: Path, count: int, head: str = "GET http://localhost/ HTTP/1.1\r\n") -> Iterator[
        subprocess.Popen[str]]:
    """``count`` connections to ``path`` from another process, held open until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", FLOOD, str(path), str(count), head],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def started(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    line = await asyncio.to_thread(proc.stdout.readline)
    return int(line)


def fetch(path: Path, port: int) -> str:
    """One GET through the proxy socket from another process (its own fds); the status line."""
    code = ("import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(20)\n"
            "s.connect(sys.argv[1])\n"
            "s.sendall(f'GET http://localhost:{sys.argv[2]}/ok HTTP/1.1\\r\\n\\r\\n'.encode())\n"
            "data = b''\n"
            "while chunk := s.recv(65536): data += chunk\n"
            "print(data.decode('latin-1'))\n")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(port)],
                         capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


@asynccontextmanager
async def peak_fds() -> AsyncIterator[list[int]]:
    """The highest supervisor fd count seen (sampled every 2 ms) while the block runs."""
    peak = [open_fds()]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], open_fds())
            await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample())
    try:
        yield peak
    finally:
        sampler.cancel()


async def settle(predicate: object, tries: int = 200) -> None:
    for _ in range(tries):
        if callable(predicate) and predicate():
            return
        await asyncio.sleep(0.05)


# -- connection floods ------------------------------------------------------------------


async def test_a_flood_from_one_session_is_capped_and_another_session_is_served(
    tmp_path: Path, host_server: tuple[int, list[str]]
) -> None:
    """1,000 held connections with a supervisor allowed ~700 fds: an uncapped proxy accepts
    until EMFILE and the other session is never answered. Capped, the flood holds 64 fds plus
    the connections of at most two accept passes that are being refused."""
    port, hits = host_server
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 700, hard))
    try:
        async with proxy(tmp_path, sessions=2, port=port) as (_, (hostile, other)):
            before = open_fds()
            async with peak_fds() as peak:
                with flood(hostile.socket_path, 1000) as proc:
                    assert await started(proc) > 0
                    await settle(lambda: len(hostile.attempts()) >= 1000 - 64)
                    served = await asyncio.to_thread(fetch, other.socket_path, port)
            grown = peak[0] - before
            assert grown <= 64 + 2 * ACCEPT_BACKLOG + 16, f"the flood held {grown} supervisor fds"
            assert served.startswith("HTTP/1.0 200") and "hello from the host" in served, served
            reasons = {a.reason for a in hostile.attempts()}
            assert any("connections" in r for r in reasons), reasons
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_many_sessions_together_stay_under_the_global_bound(tmp_path: Path) -> None:
    limits = EgressLimits(max_connections=64, max_connections_total=100)
    async with proxy(tmp_path, limits=limits, sessions=4) as (_, listeners):
        before = open_fds()
        procs = [flood(egress.socket_path, 80) for egress in listeners]
        entered = [p.__enter__() for p in procs]
        try:
            async with peak_fds() as peak:
                for proc in entered:
                    await started(proc)
                await settle(lambda: sum(len(e.attempts()) for e in listeners) >= 4 * 80 - 100)
        finally:
            for p in procs:
                p.__exit__(None, None, None)
    grown = peak[0] - before
    assert grown <= 100 + 4 * 2 * ACCEPT_BACKLOG + 16, f"{grown} supervisor fds held by four sessions"
    reasons = {a.reason for e in listeners for a in e.attempts()}
    assert any("all sessions" in r for r in reasons), reasons


async def test_connections_from_inside_a_sandbox_are_capped(
    linux: BwrapSandbox, host_server: tuple[int, list[str]]
) -> None:
    """The same flood through the in-sandbox relay: the sandbox sees 503/429 past the cap."""
    port, _ = host_server
    code = (
        "import select, socket\n"
        "held, refused = [], 0\n"
        "for _ in range(150):\n"
        "    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
        "    s.sendall(b'GET http://localhost/ HTTP/1.1\\r\\n')\n"
        "    held.append(s)\n"
        "waiting = set(held)\n"  # admitted ones never answer: read what does, until 1 s of quiet
        "while waiting:\n"
        "    ready = select.select(list(waiting), [], [], 1.0)[0]\n"
        "    if not ready: break\n"
        "    for s in ready:\n"
        "        waiting.discard(s)\n"
        "        try:\n"
        "            if s.recv(64).startswith(b'HTTP/1.1 429'): refused += 1\n"
        "        except OSError:\n"
        "            pass\n"
        "print(refused)\n"
    )
    r = await sh(linux, code, domains=(f"localhost:{port}",), timeout_s=60)
    assert int(r.stdout.strip() or -1) >= 150 - 64, r.stderr
    assert any("connections" in a.reason for a in r.blocked_network)


# -- slow clients -------------------------------------------------------------------------


async def _silent_client(path: Path, send: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(send)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


async def test_an_idle_client_is_disconnected(tmp_path: Path) -> None:
    limits = EgressLimits(idle_timeout_s=0.5)
    async with proxy(tmp_path, limits=limits) as (_, [egress]):
        answer = await _silent_client(egress.socket_path, b"GET http://localhost/ HTTP/1.1\r\n")
    assert answer.startswith(b"HTTP/1.1 408"), answer


async def _trickle_server() -> tuple[asyncio.AbstractServer, int]:
    """Upstream that sends a byte every 0.1 s forever (never idle, never done)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                writer.write(b".")
                await writer.drain()
                await asyncio.sleep(0.1)
        except (OSError, asyncio.CancelledError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_tunnel_ends_at_the_total_timeout(tmp_path: Path) -> None:
    server, port = await _trickle_server()
    limits = EgressLimits(idle_timeout_s=5, total_timeout_s=1)
    try:
        async with proxy(tmp_path, limits=limits, port=port) as (_, [egress]):
            data = await _silent_client(egress.socket_path,
                                        f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
    finally:
        server.close()
    assert data.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n.")
    assert any("total" in a.reason for a in egress.attempts())


# -- strict header parsing ------------------------------------------------------------------

SMUGGLING = {
    "space before colon": "Transfer-Encoding : chunked\r\nContent-Length: 5",
    "tab before colon": "Content-Length\t: 5",
    "obs-fold": "X-Trace: a\r\n  Transfer-Encoding: chunked\r\nContent-Length: 5",
    "duplicate content-length": "Content-Length: 5\r\nContent-Length: 5",
    "conflicting content-length": "Content-Length: 5\r\nContent-Length: 7",
    "content-length list": "Content-Length: 5, 5",
    "signed content-length": "Content-Length: +5",
    "bare LF": "X-A: b\nTransfer-Encoding: chunked\r\nContent-Length: 5",
    "bare CR": "X-A: b\rTransfer-Encoding: chunked\r\nContent-Length: 5",
    "non-token name": "X A: b\r\nContent-Length: 5",
    "control in value": "X-A: b\x00c\r\nContent-Length: 5",
    "empty name": ": b\r\nContent-Length: 5",
    "oversize head": "X-Pad: " + "a" * 40_000 + "\r\nContent-Length: 5",
}


async def _exchange(path: Path, head: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 20)
    writer.write(head)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


def _post(port: int, headers: str) -> bytes:
    return (f"POST http://localhost:{port}/smuggle HTTP/1.1\r\n{headers}\r\n\r\n"
            "hello").encode("latin-1")


async def test_a_well_formed_post_goes_through(
    tmp_path: Path, host_server: tuple[int, list[str]]
) -> None:
    """The control: the same request without the trick reaches the server."""
    port, hits = host_server
    async with proxy(tmp_path, port=port) as (_, [egress]):
        answer = await _exchange(egress.socket_path, _post(port, "Content-Length: 5"))
    assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"hello"), answer
    assert hits[-1] == f"POST /smuggle host=localhost:{port}"


@pytest.mark.parametrize("case", sorted(SMUGGLING))
async def test_ambiguous_heads_are_refused_and_recorded(
    tmp_path: Path, host_server: tuple[int, list[str]], case: str
) -> None:
    port, hits = host_server
    before = len(hits)
    async with proxy(tmp_path, port=port) as (_, [egress]):
        answer = await _exchange(egress.socket_path, _post(port, SMUGGLING[case]))
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert len(hits) == before, "the request reached the upstream server"
    [attempt] = egress.attempts()
    assert attempt.reason.startswith("malformed request"), attempt


async def test_transfer_encoding_is_refused_with_411(
    tmp_path: Path, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    before = len(hits)
    async with proxy(tmp_path, port=port) as (_, [egress]):
        answer = await _exchange(egress.socket_path,
                                 _post(port, "Transfer-Encoding: identity\r\nContent-Length: 5"))
    assert answer.startswith(b"HTTP/1.1 411"), answer
    assert len(hits) == before
    assert "Transfer-Encoding" in egress.attempts()[0].reason


async def test_spaced_transfer_encoding_from_a_sandbox_is_refused(
    linux: BwrapSandbox, host_server: tuple[int, list[str]]
) -> None:
    """The observed case, end to end through the in-sandbox relay."""
    port, hits = host_server
    before = len(hits)
    code = (
        "import socket\n"
        "s = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
        f"s.sendall(b'POST http://localhost:{port}/x HTTP/1.1\\r\\n'\n"
        "          b'Transfer-Encoding : chunked\\r\\n\\r\\n5\\r\\nhello\\r\\n0\\r\\n\\r\\n')\n"
        "print(s.recv(100).split(b'\\r\\n')[0].decode())\n"
    )
    r = await sh(linux, code, domains=(f"localhost:{port}",))
    assert r.stdout.strip() == "HTTP/1.1 400 Bad Request", r.stdout + r.stderr
    assert len(hits) == before
    assert any(a.reason.startswith("malformed request") for a in r.blocked_network)
