"""Migration 0011 on a database that holds keys from both doors: the API's '<tenant>:<key>'
become bare keys of their tenant, unless the CLI already holds that bare key."""

from __future__ import annotations

import uuid

import psycopg

from onebox.store.db import migrations

ROWS = [("acme", "acme:k1"), ("default", "default:k2"), ("default", "k2"), ("default", "k3"),
        ("acme", "acme:")]


async def test_api_keys_lose_their_tenant_prefix_without_colliding(db_url: str) -> None:
    before = [m for m in migrations() if m.version < 11]
    fix = next(m for m in migrations() if m.version == 11)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute("DROP SCHEMA onebox CASCADE")
        await conn.execute("CREATE SCHEMA onebox")
        for m in before:
            await conn.execute(m.sql.encode())
        for tenant, key in ROWS:
            await conn.execute("INSERT INTO onebox.runs (id, trace_id, source, request, tenant_id,"
                               " idempotency_key) VALUES (%s, %s, 'plan', '{}', %s, %s)",
                               (uuid.uuid4(), "0" * 32, tenant, key))
        await conn.execute(fix.sql.encode())
        cur = await conn.execute("SELECT tenant_id, idempotency_key FROM onebox.runs "
                                 "ORDER BY tenant_id, idempotency_key")
        keys = await cur.fetchall()
    assert keys == [("acme", ""), ("acme", "k1"), ("default", "default:k2"), ("default", "k2"),
                    ("default", "k3")]
