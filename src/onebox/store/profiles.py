"""Stored agent profiles (rows of onebox.profiles). See onebox.runtime.models.profiles."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from onebox.store.queries import load_queries
from onebox.store.runs import Conn, Row

Q = load_queries("profiles")
ENVIRONMENTS = load_queries("environments")


async def upsert(conn: Conn, tenant_id: str, name: str, spec: dict[str, Any]) -> Row:
    cur = await conn.execute(Q["upsert_profile"], {"tenant_id": tenant_id, "name": name,
                                                   "spec": Jsonb(spec)})
    row: Row | None = await cur.fetchone()
    assert row is not None
    return row


async def get(conn: Conn, tenant_id: str, name: str) -> Row | None:
    cur = await conn.execute(Q["get_profile"], {"tenant_id": tenant_id, "name": name})
    row: Row | None = await cur.fetchone()
    return row


async def of_tenant(conn: Conn, tenant_id: str) -> list[Row]:
    cur = await conn.execute(Q["list_profiles"], {"tenant_id": tenant_id})
    return list(await cur.fetchall())


async def all_specs(conn: Conn) -> list[dict[str, Any]]:
    cur = await conn.execute(Q["all_profile_specs"])
    return [r["spec"] for r in await cur.fetchall()]


async def kept_without_provider(conn: Conn) -> list[tuple[str, dict[str, Any]]]:
    """(needs_model, kept profile) of queued model calls of runs kept with their own
    endpoint, from before providers existed."""
    cur = await conn.execute(Q["kept_without_provider"])
    return [(r["needs_model"], r["profile"]) for r in await cur.fetchall()]


async def delete(conn: Conn, tenant_id: str, name: str) -> bool:
    cur = await conn.execute(Q["delete_profile"], {"tenant_id": tenant_id, "name": name})
    return await cur.fetchone() is not None


async def upsert_provider(conn: Conn, name: str, spec: dict[str, Any]) -> Row:
    cur = await conn.execute(Q["upsert_provider"], {"name": name, "spec": Jsonb(spec)})
    row: Row | None = await cur.fetchone()
    assert row is not None
    return row


async def provider_specs(conn: Conn) -> list[dict[str, Any]]:
    cur = await conn.execute(Q["list_providers"])
    return [r["spec"] for r in await cur.fetchall()]


async def delete_provider(conn: Conn, name: str) -> bool:
    cur = await conn.execute(Q["delete_provider"], {"name": name})
    return await cur.fetchone() is not None


async def environment_names(conn: Conn, tenant_id: str) -> list[str]:
    """The tenant's environments a profile may name (any status: one still building counts),
    read with the environments' own listing."""
    cur = await conn.execute(ENVIRONMENTS["list_environments"], {"tenant_id": tenant_id})
    return [r["name"] for r in await cur.fetchall()]
