"""Fixtures for escape attempts against the real linux backend."""

from __future__ import annotations

import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from sbx_helpers import DISK_MB

from onebox.config import SandboxSettings, Settings, load_settings
from onebox.runtime.services.service import Runtime
from onebox.sandbox.linux import BwrapSandbox
from onebox.sandbox.registry import linux_available
from onebox.store.db import Database


def _settings(home: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "backend": "linux",
        "timeout_s": 20,
        "disk_mb": DISK_MB,
        "pool_size": 0,
        "egress_allow_private": ["127.0.0.1"],
    }
    sandbox = SandboxSettings(**{**values, **overrides})  # type: ignore[arg-type]
    return load_settings(home=home, sandbox=sandbox)


@pytest.fixture(scope="session")
def sec_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if linux_available():
        pytest.skip("linux backend unavailable: " + "; ".join(linux_available()))
    return tmp_path_factory.mktemp("sec-home")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def linux(sec_home: Path) -> AsyncIterator[BwrapSandbox]:
    backend = BwrapSandbox(_settings(sec_home))
    yield backend
    await backend.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def strict_linux(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BwrapSandbox]:
    """A backend whose proxy may not reach any private address (no allow list)."""
    if linux_available():
        pytest.skip("linux backend unavailable")
    home = tmp_path_factory.mktemp("sec-strict")
    backend = BwrapSandbox(_settings(home, egress_allow_private=[]))
    yield backend
    await backend.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        _Handler.hits.append(self.path)
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        _Handler.hits.append(f"POST {self.path} host={self.headers.get('Host')}")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="session")
def host_server() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on the host's 127.0.0.1 (never reachable unless the proxy allows it)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], _Handler.hits
    server.shutdown()


@pytest.fixture
async def rt(db: Database, settings: Settings) -> AsyncIterator[Runtime]:
    """The runtime over this test's database and real sandbox backend (closed after)."""
    from onebox.sandbox.registry import get_backend

    runtime = Runtime(settings, db, get_backend(settings))
    yield runtime
    await runtime.backend.close()
    await runtime.objects.close()
