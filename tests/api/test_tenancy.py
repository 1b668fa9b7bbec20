"""A key of tenant A never sees, changes or guesses tenant B's runs, sessions, documents,
memories, cached answers or snapshots; keys are stored hashed and revocation is immediate."""

from __future__ import annotations

import hashlib

from api_helpers import Api

from onebox.knowledge.service import Knowledge
from onebox.objects import get_object_store
from onebox.runtime.services.api_keys import create_key, revoke_key
from onebox.snapshots.archive import record_snapshot

PLAN = {"name": "secret-plan", "steps": [{"id": "s", "tool": "bash", "code": "echo secret"}]}


async def _seed_acme(kapi: Api) -> dict[str, str]:
    ids: dict[str, str] = {}
    async with kapi.client("acme") as a:
        ids["run"] = (await a.post("/v1/runs", json={"plan": PLAN})).json()["run_id"]
        ids["session"] = (await a.post("/v1/sessions")).json()["id"]
        await a.post(f"/v1/sessions/{ids['session']}/execute",
                     json={"language": "bash", "code": "echo secret > s.txt"})
        ids["doc"] = (await a.post("/v1/knowledge/documents", json={
            "source": "s.md", "collection": "shared-name",
            "text": "The vault code is 4711."})).json()["document_id"]
        ids["memory"] = (await a.post("/v1/memory", json={
            "scope": "shared-name", "content": "The vault code is 4711."})).json()["id"]
    kn = Knowledge.build(kapi.rt.db, kapi.e5)
    await kn.cache.put("What is the vault code?", "4711", scope="acme/shared-name")
    store = get_object_store(kapi.settings)
    snap = await record_snapshot(kapi.rt.db, store, kapi.rt.backend.workspace(ids["session"]),
                                 session_id=ids["session"])
    await store.close()
    ids["snapshot"] = str(snap.id)
    return ids


async def test_every_resource_is_invisible_to_another_tenant(kapi: Api) -> None:
    ids = await _seed_acme(kapi)
    run, sid, doc, mem, snap = (ids[k] for k in ("run", "session", "doc", "memory", "snapshot"))
    async with kapi.client("globex") as g, kapi.client("acme") as a:
        for client, visible in ((a, True), (g, False)):
            runs = (await client.get("/v1/runs")).json()["runs"]
            assert (run in [r["id"] for r in runs]) is visible
            sessions = (await client.get("/v1/sessions")).json()["sessions"]
            assert (sid in [s["id"] for s in sessions]) is visible
            docs = (await client.get("/v1/knowledge/documents")).json()
            assert (doc in [d["id"] for d in docs["documents"]]) is visible
            hits = (await client.post("/v1/knowledge/search", json={"query": "vault code"})).json()
            assert bool(hits["hits"]) is visible
            recall = (await client.post("/v1/memory/recall", json={
                "scope": "shared-name", "query": "vault code"})).json()["memories"]
            assert (mem in [m["id"] for m in recall]) is visible
            browse = (await client.get("/v1/memory")).json()["memories"]
            assert (mem in [m["id"] for m in browse]) is visible
            cache = (await client.post("/v1/cache/lookup", json={
                "question": "What is the vault code?", "scope": "shared-name"})).json()
            assert cache["hit"] is visible
            snaps = (await client.get("/v1/snapshots")).json()["snapshots"]
            assert (snap in [s["id"] for s in snaps]) is visible

        refused = [
            ("GET", f"/v1/runs/{run}", None), ("GET", f"/v1/runs/{run}/steps", None),
            ("GET", f"/v1/runs/{run}/events", None), ("GET", f"/v1/runs/{run}/events/stream", None),
            ("GET", f"/v1/runs/{run}/files", None), ("GET", f"/v1/runs/{run}/snapshots", None),
            ("POST", f"/v1/runs/{run}/retry", None),
            ("POST", f"/v1/runs/{run}/steps/s/approve", {}),
            ("GET", f"/v1/sessions/{sid}/files", None),
            ("GET", f"/v1/sessions/{sid}/files/s.txt", None),
            ("POST", f"/v1/sessions/{sid}/execute", {"code": "print(1)"}),
            ("DELETE", f"/v1/sessions/{sid}", None),
            ("DELETE", f"/v1/knowledge/documents/{doc}", None),
            ("DELETE", f"/v1/memory/{mem}", None),
            ("GET", f"/v1/snapshots/{snap}/download", None),
            ("POST", f"/v1/snapshots/{snap}/restore", None),
            ("POST", f"/v1/runs/{run}/cancel", None),
        ]
        for method, url, body in refused:
            r = await g.request(method, url, json=body)
            assert r.status_code == 404, (method, url, r.status_code, r.text)
            assert r.json()["code"] == "not_found"
        compact = await g.post("/v1/memory/compact", json={"scope": "shared-name",
                                                            "older_than_days": 0})
        assert compact.json()["archived"] == 0
        # nothing was changed by the refused calls: acme still has everything
        assert (await a.get(f"/v1/runs/{run}")).json()["run"]["status"] == "PENDING"
        assert (await a.get(f"/v1/sessions/{sid}/files/s.txt")).content == b"secret\n"
        assert (await a.post("/v1/memory/recall", json={
            "scope": "shared-name", "query": "vault"})).json()["memories"]
        assert (await a.get(f"/v1/snapshots/{snap}/download")).status_code == 200
        assert (await a.post(f"/v1/runs/{run}/cancel")).status_code == 200


async def test_keys_are_hashed_checked_and_revocable(api_no_worker: Api) -> None:
    db = api_no_worker.rt.db
    key, row = await create_key(db, tenant_id="initech", name="ci")
    stored = await db.fetch("SELECT * FROM onebox.api_keys WHERE id = %s", (row["id"],))
    assert stored[0]["key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert key not in str(stored)
    async with api_no_worker.client(None) as anon:
        assert (await anon.get("/v1/runs")).status_code == 401
        assert (await anon.get("/v1/runs", headers={"X-API-Key": key})).status_code == 200
        wrong = await anon.get("/v1/runs", headers={"Authorization": f"Bearer {key}x"})
        assert wrong.status_code == 401 and wrong.json()["code"] == "unauthorized"
        assert (await anon.get("/healthz")).status_code == 200
        assert (await anon.get("/metrics")).status_code == 401
        await revoke_key(db, row["prefix"])
        assert (await anon.get("/v1/runs", headers={"X-API-Key": key})).status_code == 401
