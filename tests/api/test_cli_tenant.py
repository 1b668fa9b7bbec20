"""One tenant rule: the CLI acts as tenant 'default' with the API's names, so what the CLI
adds the API (and the console, which calls it) shows to tenant default, and back; another
tenant sees none of it from either door."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from api_helpers import Api
from click.testing import CliRunner

from onebox.cli.main import main
from onebox.runtime.services.api_keys import create_key


async def _cli(api: Api, *args: str) -> tuple[int, Any]:
    env = {"ONEBOX_HOME": str(api.settings.home), "ONEBOX_SANDBOX__BACKEND": "process",
           "ONEBOX_DATABASE_URL": api.settings.database_url.get_secret_value()}  # type: ignore[union-attr]
    result = await asyncio.to_thread(CliRunner().invoke, main, [*args, "--json"], env=env)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None


async def _default(api: Api) -> httpx.AsyncClient:
    key = (await create_key(api.rt.db, tenant_id="default", name="default-test"))[0]
    return httpx.AsyncClient(base_url=api.url, timeout=30,
                             headers={"Authorization": f"Bearer {key}"})


async def test_what_the_cli_adds_the_api_shows_to_default_only(kapi: Api, tmp_path: Path) -> None:
    note = tmp_path / "boiler.md"
    note.write_text("The boiler is serviced every May by Hansen.")
    assert (await _cli(kapi, "kb", "add", str(note), "-c", "house"))[0] == 0
    code, made = await _cli(kapi, "memory", "remember", "The deploy key rotates monthly.",
                            "-s", "proj")
    assert code == 0
    async with await _default(kapi) as d, kapi.client("acme") as a:
        for client, visible in ((d, True), (a, False)):
            docs = (await client.get("/v1/knowledge/documents")).json()
            assert (["house"] if visible else []) == [c["name"] for c in docs["collections"]]
            hits = (await client.post("/v1/knowledge/search",
                                      json={"query": "when is the boiler serviced"})).json()
            assert [h["document"]["collection"] for h in hits["hits"]][:1] == \
                (["house"] if visible else [])
            browse = (await client.get("/v1/memory")).json()
            assert (made["id"] in [m["id"] for m in browse["memories"]]) is visible
            assert ([{"scope": "proj"}] if visible else []) == \
                [{"scope": s["scope"]} for s in browse["scopes"]]
            recall = (await client.post("/v1/memory/recall", json={
                "scope": "proj", "query": "deploy key"})).json()["memories"]
            assert (made["id"] in [m["id"] for m in recall]) is visible
        assert (await a.delete(f"/v1/memory/{made['id']}")).status_code == 404


async def test_what_the_api_adds_for_default_the_cli_shows_and_not_another_tenants(
        kapi: Api) -> None:
    async with await _default(kapi) as d, kapi.client("acme") as a:
        await d.post("/v1/knowledge/documents", json={
            "source": "d.md", "collection": "house", "text": "The roof was fixed in 2024."})
        mem = (await d.post("/v1/memory", json={"scope": "proj",
                                                "content": "Standups are at nine."})).json()
        await a.post("/v1/knowledge/documents", json={
            "source": "a.md", "collection": "house", "text": "Acme's vault code is 4711."})
        foreign = (await a.post("/v1/memory", json={"scope": "proj",
                                                    "content": "Acme's vault code is 4711."})).json()
    code, listed = await _cli(kapi, "kb", "list")
    assert code == 0 and [c["name"] for c in listed["collections"]] == ["house"]
    assert [(x["collection"], x["source"]) for x in listed["documents"]] == [("house", "d.md")]
    _, found = await _cli(kapi, "kb", "search", "vault code roof", "-c", "house")
    assert [h["document"]["source"] for h in found["hits"]] == ["d.md"]
    _, found = await _cli(kapi, "kb", "search", "vault code")
    assert "a.md" not in [h["document"]["source"] for h in found["hits"]]
    _, recalled = await _cli(kapi, "memory", "recall", "standups vault", "-s", "proj")
    assert [m["id"] for m in recalled["memories"]] == [mem["id"]]
    code, _ = await _cli(kapi, "memory", "forget", foreign["id"])
    assert code != 0
    assert await kapi.rt.db.fetchone("SELECT 1 FROM onebox.memories WHERE id = %(id)s",
                                     {"id": foreign["id"]}) is not None
