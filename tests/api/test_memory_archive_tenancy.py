"""An archived memory (condensed by `memory compact`) belongs to its tenant like a live one:
neither the CLI (tenant default) nor another tenant's API key can delete it by its id, while
its own tenant can forget it through the API."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from api_helpers import Api
from click.testing import CliRunner

from onebox.cli.main import main
from onebox.knowledge.queries import sql

ARCHIVE = [sql("memory.archive"), "DELETE FROM onebox.memories WHERE id = ANY(%(ids)s)"]


async def _cli(api: Api, *args: str) -> tuple[int, Any]:
    env = {"ONEBOX_HOME": str(api.settings.home), "ONEBOX_SANDBOX__BACKEND": "process",
           "ONEBOX_DATABASE_URL": api.settings.database_url.get_secret_value()}  # type: ignore[union-attr]
    result = await asyncio.to_thread(CliRunner().invoke, main, [*args, "--json"], env=env)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None


async def _archived(api: Api, tenant: str, content: str) -> str:
    async with api.client(tenant) as c:
        made = (await c.post("/v1/memory", json={"scope": "vault", "content": content})).json()
    async with api.rt.db.transaction() as conn:
        for statement in ARCHIVE:  # as compaction moves rows (columns by name)
            await conn.execute(statement, {"ids": [made["id"]], "summary_id": uuid.uuid4()})
    return str(made["id"])


async def _still_archived(api: Api, memory_id: str) -> bool:
    row = await api.rt.db.fetchone(
        "SELECT 1 FROM onebox.memories_archive WHERE id = %(id)s", {"id": memory_id})
    return row is not None


async def test_the_cli_cannot_delete_another_tenants_archived_memory(kapi: Api) -> None:
    memory_id = await _archived(kapi, "acme", "Acme's vault code is 4711.")
    code, out = await _cli(kapi, "memory", "forget", memory_id)
    assert code != 0 and out == {"id": memory_id, "deleted": False}
    assert await _still_archived(kapi, memory_id)


async def test_an_api_key_forgets_only_its_own_tenants_archived_memory(kapi: Api) -> None:
    memory_id = await _archived(kapi, "acme", "Acme's alarm code is 1234.")
    async with kapi.client("globex") as other:
        assert (await other.delete(f"/v1/memory/{memory_id}")).status_code == 404
    assert await _still_archived(kapi, memory_id)
    async with kapi.client("acme") as own:
        assert (await own.delete(f"/v1/memory/{memory_id}")).status_code == 204
    assert not await _still_archived(kapi, memory_id)
