"""E2B endpoints: another tenant's key cannot reach a sandbox, and E2B paths cannot leave it.

acme makes a sandbox with the real E2B SDK against a live server; globex then tries every
E2B door into it with its own (valid) key: the control API through the SDK, and each
in-sandbox service (files, filesystem RPC, commands, the interpreter) with raw requests
naming acme's sandbox id. Each must answer "not found" and leave acme's sandbox as it was.
Paths: a planted symlink, ``..`` and absolute paths outside /home/user are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from onebox.api import create_app
from onebox.config import Settings
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database

SECRET = "acme-secret-5d2a"


@contextlib.asynccontextmanager
async def _serving(app: object) -> AsyncIterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",  # type: ignore[arg-type]
                            lifespan="on")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def live(db: Database, settings: Settings) -> AsyncIterator[tuple[str, dict[str, str]]]:
    from onebox.sandbox.registry import get_backend

    rt = Runtime(settings, db, get_backend(settings))
    keys = {t: (await create_key(db, tenant_id=t, name=f"{t}-e2b"))[0] for t in ("acme", "globex")}
    try:
        async with _serving(create_app(settings, runtime=rt)) as url:
            yield url, keys
    finally:
        await rt.backend.close()
        await rt.objects.close()


def _use(monkeypatch: pytest.MonkeyPatch, url: str, key: str) -> None:
    monkeypatch.setenv("E2B_API_URL", f"{url}/e2b")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", key)


def _acme_sandbox() -> str:
    from e2b_code_interpreter import Sandbox

    sbx = Sandbox.create(metadata={"owner": "acme"})
    sbx.files.write("/home/user/secret.txt", SECRET)
    sbx.run_code("kept = 'acme state'")
    return sbx.sandbox_id


def _globex_control(acme_id: str) -> dict[str, Any]:
    from e2b import Sandbox
    from e2b.exceptions import NotFoundException

    out: dict[str, Any] = {"listed": [s.sandbox_id for s in Sandbox.list().next_items()]}
    for name, call in (("connect", lambda: Sandbox.connect(acme_id)),
                       ("info", lambda: Sandbox.get_info(acme_id)),
                       ("timeout", lambda: Sandbox.set_timeout(acme_id, 1))):
        try:
            call()
            out[name] = "reached"
        except NotFoundException:
            out[name] = "not found"
    out["kill"] = Sandbox.kill(acme_id)
    return out


def _envelope(message: dict[str, Any]) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


def _probes(acme_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, request kwargs) of every in-sandbox door, each aimed at acme's files."""
    rpc = {"headers": {"Content-Type": "application/json"}}
    stream = {"headers": {"Content-Type": "application/connect+json"}}
    return [
        ("GET", "/files", {"params": {"path": "/home/user/secret.txt"}}),
        ("POST", "/files", {"params": {"path": "/home/user/secret.txt"}, "content": b"pwned",
                            "headers": {"Content-Type": "application/octet-stream"}}),
        ("POST", "/filesystem.Filesystem/ListDir", {**rpc, "json": {"path": "/home/user"}}),
        ("POST", "/filesystem.Filesystem/Remove",
         {**rpc, "json": {"path": "/home/user/secret.txt"}}),
        ("POST", "/process.Process/Start", {**stream, "content": _envelope(
            {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "cat secret.txt"]}})}),
        ("POST", "/execute", {"json": {"code": "kept"},
                              "headers": {"E2b-Sandbox-Port": "49999"}}),
    ]


async def _probe(client: httpx.AsyncClient, acme_id: str, key: str | None) -> list[str]:
    """What each door answered globex (status and body), for acme's sandbox id."""
    answers = []
    for method, path, kwargs in _probes(acme_id):
        headers = {"E2b-Sandbox-Id": acme_id, "E2b-Sandbox-Port": "49983",
                   **({"X-Access-Token": key} if key else {}), **kwargs.pop("headers", {})}
        response = await client.request(method, path, headers=headers, **kwargs)
        answers.append(f"{path} {response.status_code} {response.text[:200]}")
    return answers


_NO_CONTEXTS = ('422 {"code":"invalid_input","message":"code contexts are not supported: '
                'each onebox sandbox has one python interpreter; run_code without a context '
                'uses it","field":"context"}')


async def _contexts(client: httpx.AsyncClient, sandbox_id: str, key: str | None) -> list[str]:
    """What each context call answered (status and body) for ``sandbox_id``."""
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49999",
               **({"X-Access-Token": key} if key else {})}
    answers = []
    for method, path in (("POST", "/contexts"), ("GET", "/contexts"),
                         ("POST", "/contexts/default/restart"), ("DELETE", "/contexts/default")):
        response = await client.request(method, path, headers=headers, json={})
        answers.append(f"{response.status_code} {response.text}")
    return answers


async def test_another_tenant_cannot_reach_an_e2b_sandbox(
    live: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, keys = live
    _use(monkeypatch, url, keys["acme"])
    acme_id = await asyncio.to_thread(_acme_sandbox)

    _use(monkeypatch, url, keys["globex"])
    control = await asyncio.to_thread(_globex_control, acme_id)
    assert control == {"listed": [], "connect": "not found", "info": "not found",
                       "timeout": "not found", "kill": False}

    async with httpx.AsyncClient(base_url=f"{url}/e2b/sandbox", timeout=30) as client:
        for answer in await _probe(client, acme_id, keys["globex"]):
            assert " 404 " in answer or "not_found" in answer, answer
            assert SECRET not in answer
        for answer in await _probe(client, acme_id, None):
            assert " 401 " in answer or "unauthenticated" in answer, answer
        # the context calls answer before auth (the SDK sends them no token): one refusal,
        # the same for acme's sandbox and a made-up one, and acme's interpreter is untouched
        for key in (None, keys["globex"]):
            for sandbox_id in (acme_id, "api-0123456789abcdef"):
                assert await _contexts(client, sandbox_id, key) == [_NO_CONTEXTS] * 4

    _use(monkeypatch, url, keys["acme"])

    def acme_still_has_it() -> tuple[str, str | None]:
        from e2b_code_interpreter import Sandbox

        sbx = Sandbox.connect(acme_id)
        return sbx.files.read("/home/user/secret.txt"), sbx.run_code("kept").text

    assert await asyncio.to_thread(acme_still_has_it) == (SECRET, "acme state")


def _escapes() -> dict[str, str]:
    from e2b import Sandbox
    from e2b.exceptions import SandboxException

    sbx = Sandbox.create()
    sbx.commands.run("ln -s /etc/hostname leak && ln -s / rootlink && mkdir -p d && "
                     "ln -s /etc d/etc")
    out = {}
    for name, call in (
        ("symlink read", lambda: sbx.files.read("/home/user/leak")),
        ("symlinked dir list", lambda: sbx.files.list("/home/user/rootlink")),
        ("symlink in a path", lambda: sbx.files.read("/home/user/d/etc/hostname")),
        ("dotdot read", lambda: sbx.files.read("/home/user/../../etc/hostname")),
        ("absolute read", lambda: sbx.files.read("/etc/hostname")),
        ("absolute write", lambda: sbx.files.write("/tmp/x", "x")),
        ("absolute remove", lambda: sbx.files.remove("/etc")),
        ("outside cwd", lambda: sbx.commands.run("pwd", cwd="/etc")),
    ):
        try:
            out[name] = f"answered {call()!r}"
        except SandboxException as refused:
            out[name] = type(refused).__name__
    listed = {e.name: e.type.value if e.type else None for e in sbx.files.list("/home/user")}
    out["leak listed as"] = str(listed.get("leak"))
    sbx.kill()
    return out


async def test_e2b_paths_stay_in_the_workspace_and_never_follow_symlinks(
    live: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, keys = live
    _use(monkeypatch, url, keys["acme"])
    out = await asyncio.to_thread(_escapes)
    assert out == {
        "symlink read": "FileNotFoundException", "symlinked dir list": "InvalidArgumentException",
        "symlink in a path": "FileNotFoundException", "dotdot read": "InvalidArgumentException",
        "absolute read": "InvalidArgumentException", "absolute write": "InvalidArgumentException",
        "absolute remove": "InvalidArgumentException", "outside cwd": "InvalidArgumentException",
        "leak listed as": "symlink"}


async def test_an_octet_stream_body_is_an_upload_never_json(
    live: tuple[str, dict[str, str]],
) -> None:
    """Raw bytes are bounded as uploads (for E2B's file objects), so a JSON route must not
    read them as JSON: that would lift its 1 MiB bound (and the JSON depth check)."""
    url, keys = live
    code = json.dumps({"code": "print('ran')  # " + "x" * (2 << 20)}).encode()
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 headers={"Authorization": f"Bearer {keys['acme']}"}) as client:
        session = (await client.post("/v1/sessions")).json()["id"]
        response = await client.post(f"/v1/sessions/{session}/execute", content=code,
                                     headers={"Content-Type": "application/octet-stream"})
    # a JSON route keeps its 1 MiB bound whatever the content type claims: 413 before parsing
    assert response.status_code in (413, 422), response.text[:300]
    assert "ran" not in response.text
