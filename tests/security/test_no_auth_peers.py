"""Without API keys (``--no-auth``) only the operator's own uid may connect.

Loopback keeps other machines out, not other local users: an escaped session uid or any
account of the host could call the API as tenant ``default``. A client running as ``nobody``
(a real connection from another uid: ``setpriv --reuid``) is refused with 403 by the API
(``up --no-auth``) and by ``onebox mcp --http --no-auth``; the operator's own uid is served.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_e2b_tenancy import _serving

from onebox.api import create_app
from onebox.config import Settings
from onebox.runtime.services.service import Runtime

NOBODY = 65534
ONEBOX = str(Path(sys.executable).with_name("onebox"))
CURL = ["curl", "-s", "-w", "\n%{http_code}", "--max-time", "20"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")


def _curl(url: str, *, uid: int | None, extra: tuple[str, ...] = ()) -> tuple[int, str]:
    """(status, body) of a GET (or ``extra``) from a process running as ``uid``."""
    prefix = [] if uid is None else ["setpriv", f"--reuid={uid}", f"--regid={uid}",
                                     "--clear-groups"]
    proc = subprocess.run([*prefix, *CURL, *extra, url], capture_output=True, text=True,
                          timeout=60, cwd="/")
    body, _, status = proc.stdout.rpartition("\n")
    return int(status or 0), body


async def test_the_api_without_keys_serves_only_the_operators_uid(
    settings: Settings, rt: Runtime,
) -> None:
    settings.api.auth = False
    async with _serving(create_app(settings, runtime=rt)) as url:
        status, body = await asyncio.to_thread(_curl, f"{url}/v1/runs", uid=NOBODY)
        assert status == 403, body
        assert f"uid {os.geteuid()}" in body and f"uid {NOBODY}" in body
        assert '"runs":' not in body
        status, body = await asyncio.to_thread(_curl, f"{url}/v1/runs", uid=None)
        assert status == 200 and '"runs"' in body, body


async def test_mcp_http_without_keys_serves_only_the_operators_uid(
    settings: Settings, db_url: str,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "ONEBOX_HOME": str(settings.home), "DATABASE_URL": db_url,
           "ONEBOX_LOG_LEVEL": "ERROR"}
    proc = subprocess.Popen([ONEBOX, "mcp", "--http", "--no-auth", "--no-worker", "--port",
                             str(port)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        banner = ""
        for _ in range(5):
            banner += await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), 60)
            if "no-auth:" in banner:
                break
        me = pwd.getpwuid(os.geteuid()).pw_name
        assert f"no-auth: only connections from uid {os.geteuid()} ({me}) are accepted" \
            in banner, banner
        url = f"http://127.0.0.1:{port}/mcp"
        init = ("-X", "POST", "-H", "Content-Type: application/json",
                "-H", "Accept: application/json, text/event-stream", "--data",
                '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
                '"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}')
        for _ in range(300):  # the banner comes before the server listens
            status, body = await asyncio.to_thread(_curl, url, uid=None, extra=init)
            if status:
                break
            await asyncio.sleep(0.2)
        assert status == 200 and "serverInfo" in body, body
        status, body = await asyncio.to_thread(_curl, url, uid=NOBODY, extra=init)
        assert status == 403 and "serverInfo" not in body, body
    finally:
        proc.terminate()
        proc.wait(timeout=30)
