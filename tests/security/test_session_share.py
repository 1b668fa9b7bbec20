"""One tenant cannot take every session (and so every session uid): a tenant holds at most
sandbox.max_sessions_per_tenant live sessions, and another tenant still gets and uses its own."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
from test_e2b_tenancy import _serving

from onebox.api import create_app
from onebox.config import Settings
from onebox.errors import TooManyRequests
from onebox.runtime.services import tenant_sessions
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.registry import get_backend
from onebox.store.db import Database

UID_MIN, UID_MAX = 270_000, 270_015  # 16 uids, outside the default range other tests use
WHOAMI = {"code": "echo ran", "language": "bash"}


async def test_a_tenant_holds_at_most_its_share_of_sessions(db: Database, settings: Settings,
                                                            tmp_path: Path) -> None:
    settings.sandbox.max_sessions_per_tenant = 3
    settings.sandbox.session_uid_min, settings.sandbox.session_uid_max = UID_MIN, UID_MAX
    settings.sandbox.uid_registry = tmp_path / "uids"
    backend = get_backend(settings)
    keys = {t: (await create_key(db, tenant_id=t, name=f"{t}-share"))[0]
            for t in ("alice", "bob")}
    held: list[str] = []
    alice_ran: list[httpx.Response] = []
    alice_uids: set[int] = set()
    try:
        async with _serving(create_app(settings, runtime=Runtime(settings, db, backend))) as url:
            def client(tenant: str) -> httpx.AsyncClient:
                return httpx.AsyncClient(base_url=url, timeout=60,
                                         headers={"Authorization": f"Bearer {keys[tenant]}"})
            async with client("alice") as alice, client("bob") as bob:
                for _ in range(UID_MAX - UID_MIN + 2):  # more sessions than there are uids
                    opened = await alice.post("/v1/sessions", json={})
                    if opened.status_code != 201:
                        break
                    held.append(opened.json()["id"])
                    alice_ran.append(await alice.post(f"/v1/sessions/{held[-1]}/execute",
                                                      json=WHOAMI))
                    alice_uids.add(_host_uid(backend, held[-1]))
                mine = await bob.post("/v1/sessions", json={})
                ran = await bob.post(f"/v1/sessions/{mine.json()['id']}/execute", json=WHOAMI)
                bob_uid = _host_uid(backend, mine.json()["id"])
                freed = await alice.delete(f"/v1/sessions/{held[0]}")
                again = await alice.post("/v1/sessions", json={})
    finally:
        await backend.close()
    assert [r.status_code for r in alice_ran] == [200, 200, 200], alice_ran[-1].text
    assert len(alice_uids) == 3 and all(UID_MIN <= u <= UID_MAX for u in alice_uids), \
        "alice's sessions hold uids of the tiny range (the probe reaches its target)"
    assert opened.status_code == 429, opened.text
    assert "MAX_SESSIONS_PER_TENANT" in opened.json()["message"]
    assert "Traceback" not in opened.text and opened.headers.get("retry-after")
    assert mine.status_code == 201 and ran.status_code == 200, ran.text
    assert "ran" in ran.json()["stdout"]
    assert UID_MIN <= bob_uid <= UID_MAX and bob_uid not in alice_uids
    assert freed.status_code in (200, 204) and again.status_code == 201


def _host_uid(backend: SandboxBackend, session_id: str) -> int:
    """The host uid a session's sandbox runs as: its workspace root's owner."""
    return os.stat(backend.workspace(session_id)).st_uid


async def test_concurrent_opens_do_not_overshoot_the_share(db: Database) -> None:
    # This test's own database: each insert lingers before it commits, so concurrent opens
    # overlap (without a lock, every one of them counts the same committed rows).
    async with db.connection() as conn:
        await conn.execute(
            "CREATE FUNCTION onebox_test_linger() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN PERFORM pg_sleep(0.2); RETURN NEW; END$$")
        await conn.execute("CREATE TRIGGER linger BEFORE INSERT ON onebox.sessions "
                           "FOR EACH ROW EXECUTE FUNCTION onebox_test_linger()")

    async def open_one(n: int) -> bool:
        try:
            await tenant_sessions.insert_session(db, f"race-{n}", "linux", "alice", 3)
        except TooManyRequests:
            return False
        return True

    opened = await asyncio.gather(*(open_one(n) for n in range(12)))
    assert sum(opened) == 3, f"{sum(opened)} sessions opened under a share of 3"
