"""API keys: each belongs to one tenant; only the sha256 of a key is stored.

    key, row = await create_key(db, tenant_id="acme", name="ci")   # key shown once
    principal = await authenticate(db, key)                         # None when unknown/revoked

A key is ``obx_`` followed by 32 random bytes (url-safe base64), so a sha256
without salt is enough: it cannot be brute-forced, and it lets a lookup use the
unique index.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from onebox.errors import NotFound, ValidationError
from onebox.store.db import Database
from onebox.store.queries import load_queries

Q = load_queries("api_keys")
KEY_PREFIX = "obx_"
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's id and its tenant."""

    key_id: uuid.UUID | None
    tenant_id: str
    key_name: str | None = None
    key_prefix: str | None = None

    @property
    def label(self) -> str:
        """Who did it, for audit records: the key's name and prefix (or the tenant)."""
        if self.key_prefix is None:
            return f"tenant {self.tenant_id} (no auth)"
        return f"{self.key_name} (key {self.key_prefix})"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def check_tenant(tenant_id: str) -> str:
    if not TENANT_PATTERN.match(tenant_id):
        raise ValidationError(
            f"invalid tenant {tenant_id!r}: use 1-64 letters, digits, '_', '-', '.'",
            field="tenant")
    return tenant_id


async def create_key(db: Database, *, tenant_id: str, name: str) -> tuple[str, dict[str, Any]]:
    """A new key for ``tenant_id``: returns (the key, its stored row). The key is not stored."""
    check_tenant(tenant_id)
    if not name.strip() or len(name) > 200:
        raise ValidationError("a key name must be 1-200 characters", field="name")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    async with db.connection() as conn:
        cur = await conn.execute(Q["insert_key"], {
            "id": uuid.uuid4(), "tenant_id": tenant_id, "name": name,
            "key_hash": hash_key(key), "prefix": key[: len(KEY_PREFIX) + 8],
        })
        row = await cur.fetchone()
    assert row is not None
    return key, dict(row)


async def list_keys(db: Database, *, tenant_id: str | None = None) -> list[dict[str, Any]]:
    return await db.fetch(Q["list_keys"], {"tenant_id": tenant_id})


async def revoke_key(db: Database, ref: str) -> dict[str, Any]:
    """Revoke the key with this id or prefix (as `onebox keys list` prints it)."""
    rows = await db.fetch(Q["revoke_key"], {"ref": ref.strip()})
    if not rows:
        raise NotFound(f"no active API key with id or prefix {ref!r}; `onebox keys list` shows them",
                       field="key")
    return rows[0]


async def count_active_keys(db: Database) -> int:
    row = await db.fetchone(Q["count_keys"])
    return int(row["n"]) if row else 0


async def is_active(db: Database, key_id: uuid.UUID) -> bool:
    """Whether the key with this id still exists and is not revoked (a primary-key lookup)."""
    row = await db.fetchone(Q["key_active"], {"id": key_id})
    return bool(row and row["active"])


async def authenticate(db: Database, key: str) -> Principal | None:
    """The principal of an active key, or None. Records when the key was last used."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    row = await db.fetchone(Q["authenticate"], {"key_hash": hash_key(key)})
    return None if row is None else Principal(row["id"], row["tenant_id"], row["name"],
                                              row["prefix"])
