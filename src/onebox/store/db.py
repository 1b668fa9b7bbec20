"""The one database: connect (embedded or external), migrate, and hand out connections.

    db = await Database.open(settings)     # starts/attaches, checks pgvector, migrates
    async with db.transaction() as conn:   # one transaction: rows + their events
        ...
    await db.close()
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from onebox.config import Settings
from onebox.errors import ConfigError, StorageError
from onebox.store.embedded import start_embedded
from onebox.store.features import ServerFeatures, check_minimum, read_features

log = logging.getLogger(__name__)

MIGRATION_LOCK_KEY = 0x0B0B0B01  # pg_advisory_lock key held while migrating
PGVECTOR_HINT = (
    "Install pgvector on that server (Debian/Ubuntu: apt-get install postgresql-<major>-pgvector; "
    "or build it from https://github.com/pgvector/pgvector), then run CREATE EXTENSION vector "
    "as a superuser. Or unset DATABASE_URL to use onebox's embedded PostgreSQL, which includes it."
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """The numbered migrations shipped in onebox/store/migrations, in order."""
    found = []
    for entry in resources.files("onebox.store.migrations").iterdir():
        if entry.name.endswith(".sql") and entry.name[:4].isdigit():
            found.append(Migration(int(entry.name[:4]), entry.name[:-4], entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ConfigError(f"two migrations share a number: {versions}")
    return found


async def migrate(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """Apply pending migrations under an advisory lock; return the names applied now."""
    applied_now: list[str] = []
    await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
    try:
        await _ensure_pgvector(conn)
        await conn.execute("CREATE SCHEMA IF NOT EXISTS onebox")
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS onebox.schema_migrations ("
            " version int PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT version FROM onebox.schema_migrations")
        done = {row[0] for row in await cur.fetchall()}
        for m in migrations():
            if m.version in done:
                continue
            async with conn.transaction():
                await conn.execute(m.sql.encode())
                await conn.execute(
                    "INSERT INTO onebox.schema_migrations (version, name) VALUES (%s, %s)",
                    (m.version, m.name),
                )
            log.info("applied migration %s", m.name)
            applied_now.append(m.name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    return applied_now


async def _ensure_pgvector(conn: psycopg.AsyncConnection[Any]) -> None:
    cur = await conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    if await cur.fetchone() is None:
        raise ConfigError("pgvector is not installed on this PostgreSQL server. " + PGVECTOR_HINT)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigError(
            "pgvector is available but not enabled, and this user may not enable it. "
            + PGVECTOR_HINT
        ) from exc
    check_minimum(await read_features(conn))


Row = dict[str, Any]  # a row as the store hands it over (dict_row); one alias for every module
Conn = psycopg.AsyncConnection[Any]


class Database:
    """A connection pool on the onebox database, migrated and ready."""

    def __init__(self, url: str, pool: AsyncConnectionPool[Any], server: Any = None) -> None:
        self.url = url
        self.pool = pool
        self.server = server
        self.embedded = server is not None
        self.features: ServerFeatures | None = None  # set by open(): versions, capabilities

    @classmethod
    async def open(cls, settings: Settings, *, run_migrations: bool = True) -> Database:
        server = None
        if settings.database_url is not None:
            url = settings.database_url.get_secret_value()
        else:
            server, url = await asyncio.to_thread(
                start_embedded, settings.pg_dir, keep_running=settings.db_keep_running,
                engine_name=settings.db_embedded)
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                if run_migrations:
                    await migrate(conn)
                features = await read_features(conn)
        except psycopg.OperationalError as exc:
            raise StorageError(
                f"cannot connect to PostgreSQL ({_redact(url)}): {exc}. "
                "Fix: check DATABASE_URL, or unset it to use the embedded database."
            ) from exc
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url, min_size=1, max_size=settings.db_pool_max, open=False,
            kwargs={"row_factory": dict_row, "autocommit": True},
        )
        await pool.open(wait=True, timeout=30)
        database = cls(url, pool, server)
        database.features = features
        return database

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self.pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self.pool.connection() as conn, conn.transaction():
            yield conn

    async def fetch(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        async with self.connection() as conn:
            cur = await conn.execute(sql, params)
            return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Any = None) -> dict[str, Any] | None:
        async with self.connection() as conn:
            cur = await conn.execute(sql, params)
            row: dict[str, Any] | None = await cur.fetchone()
            return row

    async def close(self) -> None:
        await self.pool.close()


def _redact(url: str) -> str:
    """The URL without its password, for error messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparseable DATABASE_URL>"
    info.pop("password", None)
    return psycopg.conninfo.make_conninfo("", **{k: v for k, v in info.items() if v is not None})
