"""The embedded PostgreSQL: a real PostgreSQL 16 with pgvector, from the ``pgserver`` package.

It lives under ``$ONEBOX_HOME/pg`` and listens on a Unix socket only. Every
process that uses it registers its pid in pgserver's handle list; the last
process to exit normally stops the server. A process killed with SIGKILL
leaves its pid behind, so before attaching we drop pids that are no longer
alive: otherwise the server would never be stopped again, and a new process
would still re-attach to the running server (no second postmaster, no
corrupt data directory).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

from onebox.errors import StorageError
from onebox.processes import pid_alive

log = logging.getLogger(__name__)
# pgserver asks platformdirs for a runtime dir; without XDG_RUNTIME_DIR it warns on every import.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")

_HANDLE_LIST = ".handle_pids.json"


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


def start_embedded(pgdata: Path, *, keep_running: bool = False) -> tuple[Any, str]:
    """Start (or re-attach to) the server in ``pgdata``; return (server, uri)."""
    try:
        import pgserver
        from pgserver.postgres_server import PostgresServer
    except ImportError as exc:  # pragma: no cover - a dependency of onebox
        raise StorageError(
            "the embedded database needs the 'pgserver' package: pip install pgserver, "
            "or set DATABASE_URL to an external PostgreSQL with pgvector"
        ) from exc
    pgdata = pgdata.expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    PostgresServer.runtime_path.mkdir(parents=True, exist_ok=True)
    try:
        with PostgresServer._lock:
            if pgdata.exists():
                _prune_dead_handles(pgdata)
        server = pgserver.get_server(pgdata, cleanup_mode=None if keep_running else "stop")
        # get_server hands back the handle this process opened before for the same data dir;
        # its server may have been stopped or have crashed since, so make sure it runs.
        with PostgresServer._lock:
            server.ensure_postgres_running()
        return server, server.get_uri()
    except Exception as exc:
        log_file = pgdata / "log"
        tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
        raise StorageError(
            f"could not start the embedded PostgreSQL in {pgdata}: {exc}. "
            f"Server log tail:\n{tail}\nFix: check free disk space and permissions of {pgdata}, "
            "or point DATABASE_URL at an external PostgreSQL with pgvector."
        ) from exc


def stop_embedded(pgdata: Path) -> bool:
    """Stop the embedded server if it runs; return whether it was running."""
    from pgserver._commands import pg_ctl  # type: ignore[attr-defined]
    from pgserver.utils import PostmasterInfo

    pgdata = pgdata.expanduser().resolve()
    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running():
        return False
    user = "pgserver" if os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    return True


def embedded_status(pgdata: Path) -> dict[str, Any]:
    """Whether the embedded server in ``pgdata`` runs, with its pid and URL."""
    from pgserver.utils import PostmasterInfo

    pgdata = pgdata.expanduser().resolve()
    info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.exists() else None
    running = info is not None and info.is_running()
    return {
        "data_dir": str(pgdata),
        "initialized": (pgdata / "PG_VERSION").exists(),
        "running": running,
        "pid": info.pid if running and info else None,
        "url": info.get_uri() if running and info else None,
    }
