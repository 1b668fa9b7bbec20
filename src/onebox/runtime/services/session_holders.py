"""Which API server holds each sandbox session, so every server of one database serves it.

A hand-made session (``/v1/sessions``, an E2B sandbox, ``onebox exec`` through the API) has
its workspace and interpreter in the sandbox of the API server that created it: its
*holder*. Each server records itself in ``onebox.api_servers`` (its address, a heartbeat
every ``api.server_heartbeat_s``), and each session its holder, so:

- a request for a session held by a live server is forwarded to it (api/session_routing);
- a session whose holder stopped heartbeating for ``api.server_lease_s`` (it died, or was
  cut off) moves to the server the request reached: a compare-and-set on the row
  (``holder_epoch``) picks one server when several try; the stale local copy, if this server
  held the session before, is dropped; the files come back from the session's newest
  snapshot, and the response says the interpreter's state was lost and why;
- a server that stops cleanly snapshots every session it holds first (:func:`hand_off`), so
  the next request elsewhere gets the files back;
- each heartbeat also drops this server's copies of sessions that moved away or ended
  (:func:`sweep`): a server cut off and then back runs nothing on a copy it no longer holds.

Sessions without a holder (a worker's run sessions, local ``onebox exec``) are not routed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import os
import socket
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from onebox.config import Settings
from onebox.objects import ObjectStore
from onebox.processes import key_pid, process_key, process_key_alive
from onebox.sandbox.base import SandboxBackend
from onebox.sandbox.snapshot_files import WorkspaceChanged
from onebox.snapshots.archive import record_snapshot
from onebox.snapshots.replay import restore_into_session
from onebox.store.db import Database
from onebox.store.queries import load_queries

log = logging.getLogger(__name__)
Q = load_queries("session_holders")
FORWARD_SKEW_S = 60.0  # a forwarded request's proof is accepted this long (clocks apart)


@dataclass(frozen=True)
class ServerIdentity:
    """One API server: its id, the address other servers forward to, its host name.
    ``settled``: the address is the operator's (``api.advertise_url``) or the one a request
    reached; until then it is a guess from the settings."""

    id: str
    url: str
    host: str
    settled: bool = True
    process: str | None = None  # onebox.processes.process_key of this server's process


def _url(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def identity_for(settings: Settings) -> ServerIdentity:
    """This server's identity. Its address is ``api.advertise_url`` (the operator's: a pod's
    IP, a host name the other servers resolve), else ``http://<api.host>:<api.port>`` with a
    wildcard host replaced by this machine's address, until the first request says which
    address and port this server was reached on (:func:`settled_at`)."""
    host = socket.gethostname()
    server_id = f"{host}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    if settings.api.advertise_url:
        return ServerIdentity(server_id, settings.api.advertise_url.rstrip("/"), host,
                              process=process_key())
    bound = settings.api.host
    if bound in ("0.0.0.0", "::", ""):
        try:
            bound = socket.gethostbyname(host)
        except OSError:
            bound = "127.0.0.1"
    return ServerIdentity(server_id, _url(bound, settings.api.port), host, settled=False,
                          process=process_key())


def settled_at(me: ServerIdentity, local: tuple[str, int] | None) -> ServerIdentity:
    """``me`` with the address a request reached this server on (the socket's own address:
    a concrete IP and the real port, also when listening on a wildcard or port 0). A request
    that came over loopback to a server other hosts can reach settles only the port: other
    hosts cannot use 127.0.0.1."""
    if me.settled or not local or not isinstance(local, (tuple, list)):
        return me
    host, port = str(local[0]), int(local[1])
    guessed = urlsplit(me.url).hostname or ""
    if _loopback(host) and not _loopback(guessed):
        return replace(me, url=_url(guessed, port)) if urlsplit(me.url).port != port else me
    return replace(me, url=_url(host, port), settled=True)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True)
class Holding:
    """A session's row as routing sees it."""

    session_id: str
    status: str
    holder: str | None
    epoch: int
    url: str | None
    alive: bool
    silent_s: float | None  # since the holder's last heartbeat; None: it left (or never was)
    process: str | None = None  # the holder's onebox.processes.process_key
    exited_pid: int | None = None  # the holder ran on this kernel, as this pid, now gone


@dataclass(frozen=True)
class Moved:
    """A session that came to this server from a holder that stopped answering."""

    session_id: str
    old_holder: str | None
    reason: str
    snapshot_id: uuid.UUID | None
    snapshot_at: datetime | None
    file_count: int
    kept: bool = False  # the workspace the holder left on this host's disk is used as it is

    def header(self) -> str:
        """The response's ``Onebox-Session-Moved`` header: what happened, in one line."""
        if self.kept:
            files = "its workspace is kept as the server left it on this host"
        elif self.snapshot_id is None:
            files = "no snapshot of it existed, so its workspace starts empty"
        else:
            files = (f"{self.file_count} file(s) restored from snapshot {self.snapshot_id} "
                     f"of {self.snapshot_at:%Y-%m-%dT%H:%M:%SZ}")
        return (f"moved from server {self.old_holder or '(none)'} ({self.reason}); {files}; "
                "the interpreter's state (variables, imports, running processes) was lost")


async def cluster_key(db: Database) -> bytes:
    """The secret the servers of this database sign forwarded requests with (made once)."""
    await db.fetch(Q["make_cluster_secret"], {"secret": os.urandom(32)})
    row = await db.fetchone(Q["cluster_secret"], {})
    assert row is not None, "the cluster secret was just made"
    return bytes(row["secret"])


def forward_proof(key: bytes, server_id: str, method: str, path: str, at: float) -> str:
    """What a forwarding server sends with a request: when, and an HMAC of when, who, the
    method and the path under the cluster's key."""
    stamp = str(int(at))
    message = f"{stamp}\n{server_id}\n{method}\n{path}".encode("utf-8", "surrogateescape")
    return f"{stamp}.{hmac.new(key, message, hashlib.sha256).hexdigest()}"


def forward_is_valid(key: bytes, server_id: str, method: str, path: str, proof: str,
                     now: float, skew_s: float = FORWARD_SKEW_S) -> bool:
    stamp, _, _mac = proof.partition(".")
    if not stamp.isdigit() or abs(now - int(stamp)) > skew_s:
        return False
    return hmac.compare_digest(forward_proof(key, server_id, method, path, int(stamp)), proof)


async def register(db: Database, me: ServerIdentity) -> None:
    await db.fetch(Q["register_server"], {"id": me.id, "url": me.url, "host": me.host,
                                          "process": me.process})


async def heartbeat(db: Database, me: ServerIdentity) -> None:
    """Renew this server's row; a row another server's sweep never removes, but a server
    gone longer than the lease comes back through :func:`register`."""
    if not await db.fetch(Q["heartbeat"], {"id": me.id}):
        await register(db, me)


async def leave(db: Database, me: ServerIdentity) -> None:
    await db.fetch(Q["leave"], {"id": me.id})


async def holder_of(db: Database, session_id: str, lease_s: float) -> Holding | None:
    row = await db.fetchone(Q["holder_of"], {"id": session_id, "lease_s": lease_s})
    if row is None:
        return None
    silent = row["silent_s"]
    return Holding(str(row["id"]), str(row["status"]), row["holder"], int(row["holder_epoch"]),
                   row["url"], bool(row["alive"]), None if silent is None else float(silent),
                   row["process"])


def checked_here(holding: Holding, me: ServerIdentity) -> Holding:
    """``holding`` as it stands: a holder that ran on this kernel and pid namespace as a
    process that has exited (killed, crashed, restarted; its pid reused by another counts)
    is dead now, however recent its last heartbeat; waiting out its lease would only refuse
    the session's requests meanwhile. Anywhere else its heartbeat alone says."""
    if not holding.alive or holding.holder == me.id:
        return holding
    if process_key_alive(holding.process) is not False:
        return holding
    return replace(holding, alive=False, exited_pid=key_pid(holding.process))


def why_moved(holding: Holding, lease_s: float) -> str:
    if holding.exited_pid is not None:
        return f"its process {holding.exited_pid} on this host has exited"
    if holding.silent_s is None:
        return "it has stopped (or handed its sessions off)"
    return (f"it has not heartbeated for {holding.silent_s:.0f} s, past the "
            f"{lease_s:g} s lease")


async def move_here(db: Database, store: ObjectStore, backend: SandboxBackend,
                    holding: Holding, me: ServerIdentity, lease_s: float) -> Moved | None:
    """Take the session from a holder that stopped answering; None when another server
    moved it first (re-read the holder and go there)."""
    row = await db.fetchone(Q["take_over"], {"id": holding.session_id, "me": me.id,
                                             "old": holding.holder, "epoch": holding.epoch})
    if row is None:
        return None
    if _left_here(backend, holding):
        moved = Moved(holding.session_id, holding.holder, why_moved(holding, lease_s), None,
                      None, 0, kept=True)
    else:
        moved = await _restore_newest(db, store, backend, holding, lease_s)
    backend.interpreter_lost(holding.session_id,
                             f"the session moved from server {holding.holder or '(none)'} "
                             f"({moved.reason}), whose interpreter held its state")
    log.warning("session %s %s", holding.session_id, moved.header())
    return moved


def _left_here(backend: SandboxBackend, holding: Holding) -> bool:
    """The holder was a process of this host that has exited, and its workspace is here (the
    same ONEBOX_HOME): it is the session's newest state, newer than any snapshot."""
    return holding.exited_pid is not None \
        and holding.session_id not in local_sessions(backend) \
        and backend.workspace(holding.session_id).is_dir()


async def _restore_newest(db: Database, store: ObjectStore, backend: SandboxBackend,
                          holding: Holding, lease_s: float) -> Moved:
    await backend.cleanup(holding.session_id)  # a copy left from an earlier stay here is stale
    newest = await db.fetchone(Q["newest_snapshot"], {"id": holding.session_id})
    restored = await restore_into_session(
        db, store, backend, None if newest is None else newest["id"],
        session_id=holding.session_id)
    report = restored.report
    return Moved(holding.session_id, holding.holder, why_moved(holding, lease_s),
                 None if newest is None else newest["id"],
                 None if newest is None else newest["created_at"],
                 report.file_count if report else 0)


def local_sessions(backend: SandboxBackend) -> list[str]:
    """The session ids with a workspace in this server's sandbox."""
    table: Any = getattr(backend, "sessions", None)
    ids = getattr(table, "ids", None)
    return list(ids()) if callable(ids) else []


async def sweep(db: Database, backend: SandboxBackend, me: ServerIdentity) -> list[str]:
    """Drop this server's copies of sessions that ended or are held by another server."""
    ids = local_sessions(backend)
    if not ids:
        return []
    gone = [str(row["id"]) for row in await db.fetch(Q["not_mine"], {"ids": ids, "me": me.id})]
    for session_id in gone:
        await backend.cleanup(session_id)
    if gone:
        log.info("dropped %d local session copies held elsewhere or ended: %s", len(gone),
                 ", ".join(gone))
    return gone


async def checkpoint(db: Database, store: ObjectStore, backend: SandboxBackend,
                     me: ServerIdentity, *, all_held: bool = False,
                     wait_s: float = 30.0) -> list[str]:
    """Snapshot the sessions this server holds that were used since their newest snapshot
    (``all_held``: every one it holds), so a holder's death loses at most what changed since;
    returns the ids snapshotted. An unchanged workspace reuses its stored snapshot.

    The session's calls go on meanwhile (a background process may run for hours): each file
    is stored as it was at one moment (one that changes while it is copied makes the
    snapshot start again, up to ``CHANGED_TRIES`` times, as a step's snapshot does); a
    workspace that keeps changing past them, or a pass longer than ``wait_s``, is tried
    again at the next pass."""
    local = set(local_sessions(backend))
    query = Q["held_here"] if all_held else Q["changed_since_snapshot"]
    saved = []
    for row in await db.fetch(query, {"me": me.id}):
        session_id = str(row["id"])
        if session_id not in local:
            continue
        try:
            async with asyncio.timeout(wait_s):
                await record_snapshot(db, store, backend.workspace(session_id),
                                      session_id=session_id, kind="manual", reuse=False)
            saved.append(session_id)
        except (TimeoutError, WorkspaceChanged) as exc:
            log.info("session %s kept changing (%s); it is snapshotted on a later pass",
                     session_id, exc or "timeout")
        except Exception:  # noqa: BLE001 - one session's failure must not keep the rest
            log.exception("could not snapshot session %s; the next pass retries", session_id)
    return saved


async def hand_off(db: Database, store: ObjectStore, backend: SandboxBackend,
                   me: ServerIdentity) -> list[str]:
    """Before this server stops: snapshot every live session it holds (so the next request,
    on any server, gets the files back), then leave the server table."""
    saved = await checkpoint(db, store, backend, me, all_held=True)
    await leave(db, me)
    return saved
