"""E2B sandboxes: a onebox session of the tenant, plus what E2B's control API adds.

An E2B sandbox *is* a session (``api-<16 hex>``, the tenant's row, the same workspace the
sessions API and snapshots see). E2B adds a template name, string metadata and a deadline
(``timeout``); those live in :class:`E2bSandboxes`, in the serving process's memory. A
session made through ``/v1/sessions`` shows up as a sandbox too, with no metadata and no
deadline of its own (the backend's idle reaper still ends it).

Expiry: :func:`expire_forever` (started with the E2B router) deletes every sandbox past its
deadline, each ``sweep_s``; deleting is :func:`session_service.delete_session`, so the
workspace goes and the row is RELEASED. A server restart forgets deadlines and metadata;
the sessions stay and fall back to the idle reaper.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from onebox.errors import NotFound, ValidationError
from onebox.runtime.environments import service as environments
from onebox.runtime.services import session_service
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 24 * 3600
MAX_METADATA_KEYS = 64
MAX_METADATA_CHARS = 1024
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


class E2bSandboxes:
    """What E2B knows of each sandbox beyond its session row, keyed by sandbox (session) id."""

    def __init__(self) -> None:
        self._by_id: dict[str, E2bSandbox] = {}

    def put(self, sandbox: E2bSandbox) -> None:
        self._by_id[sandbox.sandbox_id] = sandbox

    def get(self, sandbox_id: str) -> E2bSandbox | None:
        return self._by_id.get(sandbox_id)

    def forget(self, sandbox_id: str) -> None:
        self._by_id.pop(sandbox_id, None)

    def expired(self, now: datetime) -> list[E2bSandbox]:
        return [s for s in self._by_id.values() if s.end_at is not None and s.end_at <= now]


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


def _now() -> datetime:
    return datetime.now(UTC)


async def create(
    db: Database, backend: SandboxBackend, table: E2bSandboxes, tenant_id: str, *,
    template: str, metadata: dict[str, Any] | None, timeout_s: int | None,
    envs: dict[str, Any] | None = None,
) -> E2bSandbox:
    """A new session of the tenant, recorded as an E2B sandbox with its deadline."""
    clean_metadata, clean_envs = check_metadata(metadata), check_envs(envs)
    deadline_s = check_timeout(timeout_s)
    row = await session_service.create_session(
        db, backend, tenant_id, environment=await environment_of(db, tenant_id, template))
    now = _now()
    sandbox = E2bSandbox(row["id"], tenant_id, template, now, now + timedelta(seconds=deadline_s),
                         clean_metadata, clean_envs)
    table.put(sandbox)
    return sandbox


async def environment_of(db: Database, tenant_id: str, template: str) -> str | None:
    """An E2B template names one of the tenant's built environments (``Sandbox.create("data")``
    runs with the ``data`` layer); any other name (E2B's ``base``, ``code-interpreter-v1``)
    runs on the plain sandbox."""
    built = {row["name"] for row in await environments.list_environments(db, tenant_id)
             if row["status"] == "READY"}
    return template if template in built else None


async def require(db: Database, table: E2bSandboxes, sandbox_id: str,
                  tenant_id: str) -> E2bSandbox:
    """The tenant's live sandbox; NotFound for another tenant's, a deleted or an unknown one."""
    row = await session_service.require_session(db, sandbox_id, tenant_id)
    known = table.get(sandbox_id)
    if known is not None and known.tenant_id == tenant_id:
        return known
    return _from_row(row)


def _from_row(row: dict[str, Any]) -> E2bSandbox:
    return E2bSandbox(str(row["id"]), str(row["tenant_id"]), "base", row["created_at"], None)


async def set_timeout(db: Database, table: E2bSandboxes, sandbox_id: str, tenant_id: str,
                      timeout_s: int) -> E2bSandbox:
    """E2B semantics: the sandbox now ends ``timeout_s`` from now (shorter or longer)."""
    deadline_s = check_timeout(timeout_s)
    sandbox = await require(db, table, sandbox_id, tenant_id)
    updated = replace(sandbox, end_at=_now() + timedelta(seconds=deadline_s))
    table.put(updated)
    return updated


async def kill(db: Database, backend: SandboxBackend, table: E2bSandboxes, sandbox_id: str,
               tenant_id: str) -> None:
    await require(db, table, sandbox_id, tenant_id)
    table.forget(sandbox_id)
    await session_service.delete_session(db, backend, sandbox_id, tenant_id)


async def list_for(db: Database, table: E2bSandboxes, tenant_id: str,
                   metadata: dict[str, str]) -> list[E2bSandbox]:
    """The tenant's live sandboxes whose metadata holds every ``metadata`` pair."""
    rows = await session_service.list_sessions(db, tenant_id, limit=500)
    found = []
    for row in rows:
        known = table.get(str(row["id"]))
        sandbox = known if known is not None else _from_row(row)
        if all(sandbox.metadata.get(k) == v for k, v in metadata.items()):
            found.append(sandbox)
    return found


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


async def expire_once(db: Database, backend: SandboxBackend, table: E2bSandboxes) -> list[str]:
    """Delete every sandbox past its deadline; returns their ids."""
    ended = []
    for sandbox in table.expired(_now()):
        table.forget(sandbox.sandbox_id)
        try:
            await session_service.delete_session(db, backend, sandbox.sandbox_id,
                                                 sandbox.tenant_id)
        except NotFound:
            pass
        except Exception:
            log.exception("could not delete expired E2B sandbox %s; it stays until the idle "
                          "reaper ends its session", sandbox.sandbox_id)
            continue
        ended.append(sandbox.sandbox_id)
    return ended


async def expire_forever(db: Database, backend: SandboxBackend, table: E2bSandboxes,
                         sweep_s: float = SWEEP_S) -> None:
    while True:
        await asyncio.sleep(sweep_s)
        try:
            ended = await expire_once(db, backend, table)
        except Exception:
            log.exception("the E2B sandbox expiry pass failed; the next one retries")
            continue
        if ended:
            log.info("deleted %d E2B sandbox(es) past their timeout: %s", len(ended),
                     ", ".join(ended))
