"""E2B sandboxes: a onebox session of the tenant, plus what E2B's control API adds.

An E2B sandbox *is* a session (``api-<16 hex>``, the tenant's row, the same workspace the
sessions API and snapshots see). E2B adds a template name, string metadata, envs and a
deadline (``timeout``); they live on the session's row in PostgreSQL, so a restarted server
and every other server of the database see the same sandbox. A session made through
``/v1/sessions`` shows up as a sandbox too, with no metadata and no deadline of its own (the
backend's idle reaper still ends it).

Expiry: :func:`expire_forever` (started with the E2B router, on every server) ends each
sandbox past its deadline, each ``sweep_s``: the ones this server holds (workspace and row),
and the rows of those whose holder stopped heartbeating (that holder drops its copy when it
comes back, runtime/services/session_holders).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from onebox.errors import NotFound, ValidationError
from onebox.runtime.environments import service as environments
from onebox.runtime.services import session_service, tenant_sessions
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 24 * 3600
MAX_METADATA_KEYS = 64
MAX_METADATA_CHARS = 1024
LIST_MAX = 500  # sandboxes one Sandbox.list() sees, over all its pages
SWEEP_S = 1.0
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class E2bSandbox:
    sandbox_id: str
    tenant_id: str
    template: str
    started_at: datetime
    end_at: datetime | None
    metadata: dict[str, str] = field(default_factory=dict)
    envs: dict[str, str] = field(default_factory=dict)  # for every command and cell in it


def check_timeout(timeout_s: int | None) -> int:
    """E2B's sandbox ``timeout`` (seconds), defaulted and bounded."""
    if timeout_s is None:
        return DEFAULT_TIMEOUT_S
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValidationError(f"timeout must be 1-{MAX_TIMEOUT_S} seconds, got {timeout_s}",
                              field="timeout")
    return timeout_s


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, str]:
    items = dict(metadata or {})
    if len(items) > MAX_METADATA_KEYS:
        raise ValidationError(f"metadata holds at most {MAX_METADATA_KEYS} keys", field="metadata")
    for key, value in items.items():
        if not isinstance(value, str) or len(key) + len(value) > MAX_METADATA_CHARS:
            raise ValidationError(f"metadata[{key!r}] must be a string; key and value at most "
                                  f"{MAX_METADATA_CHARS} characters", field=f"metadata.{key}")
    return items


def check_envs(envs: dict[str, Any] | None) -> dict[str, str]:
    items = dict(envs or {})
    for name, value in items.items():
        if not ENV_NAME.match(name) or not isinstance(value, str):
            raise ValidationError(f"envs[{name!r}]: a name of letters, digits and '_' (not "
                                  "first) and a string value", field=f"envs.{name}")
    return items


async def create(
    db: Database, backend: SandboxBackend, tenant_id: str, *, template: str,
    metadata: dict[str, Any] | None, timeout_s: int | None, envs: dict[str, Any] | None = None,
    holder: str | None = None,
) -> E2bSandbox:
    """A new session of the tenant, recorded as an E2B sandbox with its deadline."""
    fields = tenant_sessions.E2bFields(template, check_metadata(metadata), check_envs(envs),
                                       check_timeout(timeout_s))
    row = await session_service.create_session(
        db, backend, tenant_id, environment=await environment_of(db, tenant_id, template),
        holder=holder, e2b=fields)
    found = await tenant_sessions.e2b_session(db, row["id"], tenant_id)
    if found is None:
        raise NotFound(f"sandbox {row['id']} ended while it was being created",
                       field="sandbox_id")
    return _from_row(found)


async def environment_of(db: Database, tenant_id: str, template: str) -> str | None:
    """An E2B template names one of the tenant's built environments (``Sandbox.create("data")``
    runs with the ``data`` layer); any other name (E2B's ``base``, ``code-interpreter-v1``)
    runs on the plain sandbox."""
    built = {row["name"] for row in await environments.list_environments(db, tenant_id)
             if row["status"] == "READY"}
    return template if template in built else None


async def require(db: Database, sandbox_id: str, tenant_id: str) -> E2bSandbox:
    """The tenant's live sandbox; NotFound for another tenant's, a deleted or an unknown one."""
    row = await tenant_sessions.e2b_session(db, sandbox_id, tenant_id)
    if row is None:
        raise NotFound(f"session {sandbox_id} does not exist (or was deleted)",
                       field="session_id")
    return _from_row(row)


def _from_row(row: dict[str, Any]) -> E2bSandbox:
    return E2bSandbox(str(row["id"]), str(row["tenant_id"]), row["e2b_template"] or "base",
                      row["created_at"], row["end_at"], dict(row["e2b_metadata"] or {}),
                      dict(row["e2b_envs"] or {}))


async def set_timeout(db: Database, sandbox_id: str, tenant_id: str, timeout_s: int,
                      extend_only: bool = False) -> E2bSandbox:
    """E2B semantics: the sandbox now ends ``timeout_s`` from now (shorter or longer);
    ``extend_only`` (connect's timeout) never makes a running sandbox end sooner."""
    row = await tenant_sessions.set_end_at(db, sandbox_id, tenant_id, check_timeout(timeout_s),
                                           extend_only)
    if row is None:
        raise NotFound(f"session {sandbox_id} does not exist (or was deleted)",
                       field="session_id")
    return _from_row(row)


async def kill(db: Database, backend: SandboxBackend, sandbox_id: str, tenant_id: str) -> None:
    await require(db, sandbox_id, tenant_id)
    await session_service.delete_session(db, backend, sandbox_id, tenant_id)


async def list_for(db: Database, tenant_id: str, metadata: dict[str, str]) -> list[E2bSandbox]:
    """The tenant's live sandboxes whose metadata holds every ``metadata`` pair."""
    return [_from_row(row) for row in
            await tenant_sessions.e2b_sessions(db, tenant_id, metadata, limit=LIST_MAX)]


@dataclass(frozen=True)
class ListQuery:
    """E2B's ``Sandbox.list`` filters, order and page (``next_token`` from the last page)."""

    metadata: dict[str, str] = field(default_factory=dict)
    template: str | None = None
    started_after: datetime | None = None
    order: str = "desc"  # by start time, newest first as on E2B
    limit: int = LIST_MAX
    next_token: str | None = None


async def list_page(db: Database, tenant_id: str,
                    query: ListQuery) -> tuple[list[E2bSandbox], str | None]:
    """One page of the tenant's sandboxes and the token of the next (None on the last). The
    token names the last sandbox given, so one started or ended meanwhile shifts nothing."""
    found = [s for s in await list_for(db, tenant_id, query.metadata)
             if (query.template is None or s.template == query.template)
             and (query.started_after is None or s.started_at >= query.started_after)]
    found.sort(key=_list_key, reverse=query.order == "desc")
    if query.next_token:
        last = _token_key(query.next_token)
        found = [s for s in found
                 if (_list_key(s) < last if query.order == "desc" else _list_key(s) > last)]
    page = found[:query.limit]
    more = len(found) > query.limit
    return page, (f"{page[-1].started_at.isoformat()}|{page[-1].sandbox_id}" if more else None)


def _list_key(sandbox: E2bSandbox) -> tuple[datetime, str]:
    return sandbox.started_at, sandbox.sandbox_id


def _token_key(token: str) -> tuple[datetime, str]:
    started, _, sandbox_id = token.partition("|")
    try:
        moment = datetime.fromisoformat(started)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:  # the tokens onebox gives carry their zone
        raise ValidationError(f"nextToken {token[:80]!r} is not one onebox gave: pass the "
                              "x-next-token of the previous page", field="nextToken")
    return moment, sandbox_id


def parse_metadata_query(query: str | None) -> dict[str, str]:
    """E2B's list filter ``metadata=k1=v1&k2=v2`` (URL-encoded as one query value)."""
    from urllib.parse import parse_qsl

    if not query:
        return {}
    try:
        return dict(parse_qsl(query, strict_parsing=True))
    except ValueError:
        raise ValidationError("metadata must look like 'key1=value1&key2=value2'",
                              field="metadata") from None


async def expire_once(db: Database, backend: SandboxBackend, me: str | None = None,
                      lease_s: float = 15.0) -> list[str]:
    """End every sandbox past its deadline this server may end; returns their ids. One held
    here (or by nobody) loses its workspace and row; one whose holder stopped heartbeating
    loses its row (the holder drops its copy when it comes back)."""
    ended = []
    for row in await tenant_sessions.expired_sessions(db, me, lease_s):
        sandbox_id, tenant_id = str(row["id"]), str(row["tenant_id"])
        try:
            if row["holder"] in (None, me):
                await session_service.delete_session(db, backend, sandbox_id, tenant_id)
            else:
                await tenant_sessions.release_session(db, sandbox_id, tenant_id)
        except NotFound:
            pass
        except Exception:
            log.exception("could not delete expired E2B sandbox %s; the next pass retries",
                          sandbox_id)
            continue
        ended.append(sandbox_id)
    return ended


async def expire_forever(db: Database, backend: SandboxBackend, me: Callable[[], str | None],
                         lease_s: float = 15.0, sweep_s: float = SWEEP_S) -> None:
    """:func:`expire_once` every ``sweep_s``; ``me`` says this server's id (None before it
    joined the server table)."""
    while True:
        await asyncio.sleep(sweep_s)
        try:
            ended = await expire_once(db, backend, me(), lease_s)
        except Exception:
            log.exception("the E2B sandbox expiry pass failed; the next one retries")
            continue
        if ended:
            log.info("deleted %d E2B sandbox(es) past their timeout: %s", len(ended),
                     ", ".join(ended))
