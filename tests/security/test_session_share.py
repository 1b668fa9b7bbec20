"""One tenant cannot take every session (and so every session uid): a tenant holds at most
sandbox.max_sessions_per_tenant live sessions, and another tenant still gets and uses its own."""

from __future__ import annotations

from test_request_bounds import tenant_client

from onebox.config import Settings
from onebox.runtime.service import Runtime


async def test_a_tenant_holds_at_most_its_share_of_sessions(rt: Runtime,
                                                            settings: Settings) -> None:
    settings.sandbox.max_sessions_per_tenant = 3
    async with tenant_client(rt, "alice") as alice, tenant_client(rt, "bob") as bob:
        held = [await alice.post("/v1/sessions", json={}) for _ in range(3)]
        refused = await alice.post("/v1/sessions", json={})
        mine = await bob.post("/v1/sessions", json={})
        ran = await bob.post(f"/v1/sessions/{mine.json()['id']}/execute",
                             json={"code": "echo bob", "language": "bash"})
        freed = await alice.delete(f"/v1/sessions/{held[0].json()['id']}")
        again = await alice.post("/v1/sessions", json={})
    assert [r.status_code for r in held] == [201, 201, 201]
    assert refused.status_code == 429, refused.text
    assert "MAX_SESSIONS_PER_TENANT" in refused.json()["message"]
    assert "Traceback" not in refused.text and refused.headers.get("retry-after")
    assert mine.status_code == 201 and ran.status_code == 200, ran.text
    assert "bob" in ran.json()["stdout"]
    assert freed.status_code in (200, 204) and again.status_code == 201
