"""Forwarding between API servers: nothing a tenant sends chooses where a request goes, and
a forged forwarding header cannot make a server that does not hold a session serve it."""

from __future__ import annotations

import sys
from pathlib import Path

from onebox.config import Settings
from onebox.objects.fs import FsObjectStore
from onebox.store.db import Database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from test_session_routing import (  # noqa: E402,F401  (cluster is a fixture)
    Cluster,
    Server,
    _free_port,
    _host_settings,
    cluster,
)


async def test_a_forged_forwarding_header_gets_no_local_copy(cluster: Cluster) -> None:  # noqa: F811
    async with cluster.client(0) as one, cluster.client(1) as two:
        session = (await one.post("/v1/sessions")).json()["id"]
        await one.post(f"/v1/sessions/{session}/execute",
                       json={"code": "echo mine > f.txt", "language": "bash"})
        forged = await two.get(f"/v1/sessions/{session}/files/f.txt",
                               headers={"Onebox-Forwarded-By": "evil"})
        assert forged.status_code == 403 and forged.json()["code"] == "forward_refused"
        assert not cluster.servers[1].has_copy(session), "the forged header made a copy"
        honest = await two.get(f"/v1/sessions/{session}/files/f.txt")
        assert honest.status_code == 200 and honest.text == "mine\n"


async def test_no_header_a_tenant_sends_picks_the_server(
        cluster: Cluster, db: Database, settings: Settings) -> None:  # noqa: F811
    """The holder's address comes from onebox.api_servers only: Host, X-Forwarded-Host and
    the like change nothing about where the request goes."""
    async with cluster.client(0) as one, cluster.client(1) as two:
        session = (await one.post("/v1/sessions")).json()["id"]
        await one.post(f"/v1/sessions/{session}/execute",
                       json={"code": "echo here > f.txt", "language": "bash"})
        steer = {"X-Forwarded-Host": "169.254.169.254", "Forwarded": "host=127.0.0.1:1",
                 "X-Original-URL": "http://127.0.0.1:1/", "Onebox-Session-Moved": "x"}
        got = await two.get(f"/v1/sessions/{session}/files/f.txt", headers=steer)
        assert got.status_code == 200 and got.text == "here\n"
    rows = await db.fetch("SELECT url FROM onebox.api_servers ORDER BY url")
    assert sorted(r["url"] for r in rows) == sorted(s.url for s in cluster.servers)


async def _no_auth_server(db: Database, settings: Settings, home: Path,
                          objects: FsObjectStore) -> Server:
    """`onebox serve --no-auth` on the cluster's database (loopback, no keys)."""
    from api_helpers import start_server

    from onebox.api import create_app
    from onebox.runtime.services.service import Runtime
    from onebox.sandbox.registry import get_backend

    port = _free_port()
    host = _host_settings(settings, home, port)
    host.api = host.api.model_copy(update={"auth": False, "host": "127.0.0.1"})
    backend = get_backend(host)
    app = create_app(host, runtime=Runtime(host, db, backend, objects=objects))
    server, task, url = await start_server(app, port)
    return Server("no-auth", url, backend, app, server, task)


async def test_a_no_auth_server_is_never_reached_through_an_authenticated_one(
        cluster: Cluster, db: Database, settings: Settings, tmp_path: Path) -> None:  # noqa: F811
    """Issue 37, case 1: `serve --no-auth` on the same database registered itself; server A
    forwarded session requests to it as its own (root) user, which its same-user check let
    through: Bob's key, or none, read and ran code in the default tenant's session, and a
    dot-segment path reached every route of the no-auth server."""
    import httpx

    open_server = await _no_auth_server(db, settings, tmp_path / "open", cluster.objects)
    try:
        async with httpx.AsyncClient(base_url=open_server.url, timeout=30) as local:
            made = await local.post("/v1/sessions")
            assert made.status_code == 201, made.text
            session = made.json()["id"]
            wrote = await local.post(f"/v1/sessions/{session}/execute",
                                     json={"code": "echo secret > s.txt", "language": "bash"})
            assert wrote.status_code == 200, wrote.text
        paths = [f"/v1/sessions/{session}/files/s.txt",
                 f"/v1/sessions/{session}/%2E%2E/%2E%2E/v1/runs",
                 f"/v1/sessions/{session}/../../v1/runs",
                 f"/e2b/sandboxes/{session}/%2e%2e/%2e%2e/v1/profiles"]
        async with cluster.client(0, "globex") as bob, \
                httpx.AsyncClient(base_url=cluster.servers[0].url, timeout=30) as nobody:
            for client in (bob, nobody):
                for path in paths:
                    got = await client.get(path)
                    assert got.status_code in (400, 401, 404), (path, got.status_code, got.text)
                    assert "secret" not in got.text
                ran = await client.post(f"/v1/sessions/{session}/execute",
                                        json={"code": "cat s.txt", "language": "bash"})
                assert ran.status_code in (401, 404) and "secret" not in ran.text
        rows = await db.fetch("SELECT url FROM onebox.api_servers")
        assert open_server.url not in {r["url"] for r in rows}, "the no-auth server joined"
        async with httpx.AsyncClient(base_url=open_server.url, timeout=30) as local:
            member = cluster.servers[0].state.server.id
            forged = await local.get(f"/v1/sessions/{session}/files/s.txt",
                                     headers={"Onebox-Forwarded-By": member})
            assert forged.status_code == 403 and forged.json()["code"] == "forward_refused"
    finally:
        await open_server.stop()
        await open_server.backend.close()


async def test_every_route_refuses_dot_segments(cluster: Cluster) -> None:  # noqa: F811
    async with cluster.client(0) as one:
        session = (await one.post("/v1/sessions")).json()["id"]
        # percent-encoded: a client normalises plain dot segments before it sends them
        for path in (f"/v1/sessions/{session}/%2E%2E/%2E%2E/v1/runs", "/v1/runs/%2E/x",
                     f"/e2b/sandboxes/{session}/%2e%2e/%2e%2e/v1/profiles",
                     "/v1/%2e%2e/v1/profiles", f"/v1/sessions/{session}/files/%2E%2E/x"):
            got = await one.get(path)
            assert got.status_code == 400 and got.json()["code"] == "bad_path", (path, got.text)
