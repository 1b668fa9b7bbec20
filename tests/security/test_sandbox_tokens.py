"""A sandbox's access token (E2B's ``envdAccessToken``) opens that sandbox and nothing else.

E2B users hand the token to browsers and workers for direct file access, so it must not be
the tenant's API key: it reaches its own sandbox's files (on every API server of the
database), not another sandbox of the same tenant, no ``/v1`` route, no control-API call,
and it dies with the sandbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from test_e2b_tenancy import _serving as serving

from onebox.api import create_app
from onebox.config import Settings
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database


@pytest.fixture
async def two_servers(db: Database, settings: Settings) -> AsyncIterator[tuple[str, str, str]]:
    """Two API servers over one database (as behind a load balancer) and acme's key."""
    from onebox.sandbox.registry import get_backend

    rt = Runtime(settings, db, get_backend(settings))
    key = (await create_key(db, tenant_id="acme", name="acme-e2b"))[0]
    try:
        async with serving(create_app(settings, runtime=rt)) as one, \
                serving(create_app(settings, runtime=rt)) as two:
            yield one, two, key
    finally:
        await rt.backend.close()
        await rt.objects.close()


def _in(sandbox_id: str, token: str) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}


async def _create(client: httpx.AsyncClient, key: str) -> tuple[str, str]:
    response = await client.post("/e2b/v2/sandboxes", json={"templateID": "base"},
                                 headers={"X-API-Key": key})
    assert response.status_code == 201, response.text
    return response.json()["sandboxID"], response.json()["envdAccessToken"]


async def _write(client: httpx.AsyncClient, sandbox_id: str, token: str,
                 data: bytes) -> httpx.Response:
    return await client.post("/e2b/sandbox/files", params={"path": "/home/user/f.txt"},
                             content=data, headers={**_in(sandbox_id, token),
                                                    "Content-Type": "application/octet-stream"})


async def _read(client: httpx.AsyncClient, sandbox_id: str, token: str) -> httpx.Response:
    return await client.get("/e2b/sandbox/files", params={"path": "/home/user/f.txt"},
                            headers=_in(sandbox_id, token))


async def test_a_sandbox_token_opens_its_sandbox_only(
    two_servers: tuple[str, str, str],
) -> None:
    one, two, key = two_servers
    async with httpx.AsyncClient(base_url=one, timeout=60) as c1, \
            httpx.AsyncClient(base_url=two, timeout=60) as c2:
        a, token_a = await _create(c1, key)
        b, token_b = await _create(c1, key)
        assert token_a and token_b and len({token_a, token_b, key}) == 3
        assert key not in token_a

        # its own sandbox, through either server
        assert (await _write(c1, a, token_a, b"mine")).status_code == 200
        assert (await _read(c2, a, token_a)).content == b"mine"
        assert (await _write(c1, b, token_b, b"b's")).status_code == 200

        # another sandbox of the same tenant: neither read nor written
        for answer in (await _read(c1, b, token_a), await _write(c2, b, token_a, b"pwned")):
            assert answer.status_code in (401, 404), answer.text
        assert (await _read(c1, b, token_b)).content == b"b's"

        # not an API key: no /v1 route, no control-API call
        as_key = [{"Authorization": f"Bearer {token_a}"}, {"X-API-Key": token_a}]
        for headers in as_key:
            for method, path in (("GET", "/v1/runs"), ("POST", "/v1/sessions"),
                                 ("GET", f"/v1/sessions/{a}/files"), ("GET", "/e2b/v2/sandboxes"),
                                 ("GET", f"/e2b/sandboxes/{a}"),
                                 ("DELETE", f"/e2b/sandboxes/{a}")):
                answer = await c1.request(method, path, headers=headers)
                assert answer.status_code == 401, (method, path, answer.text)

        # connect hands out the same token (E2B's Sandbox.connect), from any server
        again = await c2.post(f"/e2b/v2/sandboxes/{a}/connect", json={},
                              headers={"X-API-Key": key})
        assert again.json()["envdAccessToken"] == token_a

        # it dies with the sandbox
        assert (await c1.delete(f"/e2b/sandboxes/{a}", headers={"X-API-Key": key})
                ).status_code == 204
        for client in (c1, c2):
            assert (await _read(client, a, token_a)).status_code in (401, 404)
            assert (await _write(client, a, token_a, b"late")).status_code in (401, 404)
        # every in-sandbox call with a dead sandbox's token is "not found" (docs/e2b.md),
        # /health alone answers E2B's proxy 502 "... was not found", which is what the SDK's
        # is_running() reads as False (a 404 would raise NotFoundException there)
        for path, body in (("/e2b/sandbox/execute", {"code": "1"}),
                           ("/e2b/sandbox/process.Process/List", {}),
                           ("/e2b/sandbox/filesystem.Filesystem/Stat", {"path": "/home/user"})):
            answer = await c1.post(path, json=body, headers={
                **_in(a, token_a), "Content-Type": "application/json"})
            assert answer.status_code == 404, (path, answer.status_code, answer.text[:200])
        health = await c1.get("/e2b/sandbox/health", headers=_in(a, token_a))
        assert health.status_code == 502 and "was not found" in health.text
