"""Knowledge, memory and cache over HTTP, on the real embedding model."""

from __future__ import annotations

from api_helpers import Api


async def test_documents_add_upload_list_search_delete(kapi: Api) -> None:
    async with kapi.client() as c:
        r = await c.post("/v1/knowledge/documents", json={
            "source": "ops/leases.md", "collection": "ops", "title": "Leases",
            "text": "Workers renew their leases every second. A lost worker's step is retried."})
        assert r.status_code == 201, r.text
        doc_id = r.json()["document_id"]
        assert r.json()["status"] == "added" and r.json()["collection"] == "ops"
        up = await c.post("/v1/knowledge/upload", data={"collection": "ops"}, files={
            "file": ("backup.md", b"# Backups\n\nThe database is backed up nightly at 02:00.")})
        assert up.status_code == 201, up.text
        listing = (await c.get("/v1/knowledge/documents")).json()
        assert [c_["name"] for c_ in listing["collections"]] == ["ops"]
        assert {d["source"] for d in listing["documents"]} == {"ops/leases.md", "backup.md"}
        hits = (await c.post("/v1/knowledge/search", json={
            "query": "when is the database backed up?", "k": 2})).json()["hits"]
        assert hits[0]["document"]["source"] == "backup.md"
        assert hits[0]["document"]["collection"] == "ops"
        missing = await c.post("/v1/knowledge/search", json={"query": "x", "collections": ["nope"]})
        assert missing.status_code == 404 and missing.json()["field"] == "collections"
        assert (await c.delete(f"/v1/knowledge/documents/{doc_id}")).status_code == 204
        assert (await c.delete(f"/v1/knowledge/documents/{doc_id}")).status_code == 404
        left = (await c.get("/v1/knowledge/documents")).json()["documents"]
        assert [d["source"] for d in left] == ["backup.md"]
        bad = await c.post("/v1/knowledge/upload", files={"file": ("x.exe", b"MZ")})
        assert bad.status_code == 422 and bad.json()["field"] == "file"


async def test_memory_remember_dedup_recall_browse_forget_compact(kapi: Api) -> None:
    async with kapi.client() as c:
        first = await c.post("/v1/memory", json={"scope": "proj", "content": "Ana's office is room 12.",
                                                 "user_id": "ana"})
        assert first.status_code == 201, first.text
        record = first.json()
        assert record["deduplicated"] is False and record["scope"] == "proj"
        assert record["content"] == "Ana's office is room 12." and record["user_id"] == "ana"
        dup = await c.post("/v1/memory", json={"scope": "proj", "content": "Ana's office is room 12.",
                                               "user_id": "ana"})
        assert dup.status_code == 200
        assert dup.json()["deduplicated"] is True and dup.json()["id"] == record["id"]
        other = (await c.post("/v1/memory", json={"scope": "proj", "user_id": "ana",
                                                  "content": "The deploy key rotates monthly."})).json()
        recalled = (await c.post("/v1/memory/recall", json={
            "scope": "proj", "query": "where is Ana's office?", "user_id": "ana"})).json()
        assert recalled["memories"][0]["id"] == record["id"]
        browse = (await c.get("/v1/memory", params={"scope": "proj"})).json()
        assert browse["scopes"] == [{**browse["scopes"][0], "scope": "proj", "memories": 2}]
        assert {m["id"] for m in browse["memories"]} == {record["id"], other["id"]}
        assert (await c.delete(f"/v1/memory/{other['id']}")).status_code == 204
        assert (await c.delete(f"/v1/memory/{other['id']}")).status_code == 404
        compacted = (await c.post("/v1/memory/compact", json={"scope": "proj",
                                                              "older_than_days": 0})).json()
        assert compacted == {"archived": 0, "summaries": []}  # one memory: nothing to condense


async def test_cache_lookup_hits_a_stored_answer(kapi: Api) -> None:
    from onebox.knowledge.service import Knowledge

    kn = Knowledge.build(kapi.rt.db, kapi.e5)
    await kn.cache.put("What port does the server use?", "8420", scope="acme/faq")
    async with kapi.client() as c:
        hit = (await c.post("/v1/cache/lookup", json={
            "question": "What port does the server use?", "scope": "faq"})).json()
        assert hit["hit"] is True and hit["answer"] == "8420"
        miss = (await c.post("/v1/cache/lookup", json={
            "question": "Who wrote the manual?", "scope": "faq"})).json()
        assert miss["hit"] is False
