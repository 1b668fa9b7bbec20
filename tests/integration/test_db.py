"""The database: migrations are idempotent and safe when two processes run them at once."""

from __future__ import annotations

import asyncio

import psycopg

from onebox.store.db import Database, migrate, migrations


async def test_template_has_every_migration(db: Database) -> None:
    rows = await db.fetch("SELECT version FROM onebox.schema_migrations ORDER BY version")
    assert [r["version"] for r in rows] == [m.version for m in migrations()]


async def test_rerunning_migrations_is_a_noop(db_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        assert await migrate(conn) == []


async def test_concurrent_migrations_apply_each_once(pg_server_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_server_url, autocommit=True) as conn:
        await conn.execute("DROP DATABASE IF EXISTS race_mig WITH (FORCE)")
        await conn.execute("CREATE DATABASE race_mig")
    url = psycopg.conninfo.make_conninfo(pg_server_url, dbname="race_mig")

    async def one() -> list[str]:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            return await migrate(conn)

    results = await asyncio.gather(*(one() for _ in range(4)))
    applied = [name for r in results for name in r]
    assert sorted(applied) == sorted(m.name for m in migrations())
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM onebox.schema_migrations")
        assert (await cur.fetchone())[0] == len(migrations())
