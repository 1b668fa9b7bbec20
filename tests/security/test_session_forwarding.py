"""Forwarding between API servers: nothing a tenant sends chooses where a request goes, and
a forged forwarding header cannot make a server that does not hold a session serve it."""

from __future__ import annotations

import sys
from pathlib import Path

from onebox.config import Settings
from onebox.store.db import Database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from test_session_routing import Cluster, cluster  # noqa: E402,F401  (cluster is a fixture)


async def test_a_forged_forwarding_header_gets_no_local_copy(cluster: Cluster) -> None:  # noqa: F811
    async with cluster.client(0) as one, cluster.client(1) as two:
        session = (await one.post("/v1/sessions")).json()["id"]
        await one.post(f"/v1/sessions/{session}/execute",
                       json={"code": "echo mine > f.txt", "language": "bash"})
        forged = await two.get(f"/v1/sessions/{session}/files/f.txt",
                               headers={"Onebox-Forwarded-By": "evil"})
        assert forged.status_code == 503 and forged.json()["code"] == "session_moving"
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
