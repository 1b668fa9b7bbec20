"""A sandbox's access token: it reaches that one live session, nothing else.

    token = await token_for(db, secrets, "api-0123456789abcdef")   # E2B's envdAccessToken
    tenant = await tenant_of_token(db, secrets, token, sandbox_id)  # None: refuse

The token is ``obxs_`` + HMAC-SHA256 over the session's id, tenant and creation time, keyed
with a random secret kept in the database (``onebox.server_secrets``, made on first use), so:

- every API server of the database accepts a token any of them handed out, and the same
  sandbox always gets the same token (E2B's ``Sandbox.connect`` hands it out again);
- it is not an API key (``api_keys.authenticate`` refuses it): no ``/v1`` route, no control
  API call and no other sandbox accepts it;
- it dies with the session: once the row is RELEASED or REAPED (kill, timeout, idle reaper)
  no live session matches it, and a later session with the same id has another creation time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from onebox.store.db import Database
from onebox.store.queries import load_queries

Q = load_queries("sandbox_tokens")
TOKEN_PREFIX = "obxs_"
SECRET_NAME = "sandbox_token"
MAX_TOKEN_CHARS = 200


@dataclass
class SecretCache:
    """The signing secret, read once per process (it never changes)."""

    value: bytes | None = None


async def _secret(db: Database, cache: SecretCache) -> bytes:
    if cache.value is None:
        async with db.connection() as conn:
            await conn.execute(Q["insert_secret"],
                               {"name": SECRET_NAME, "secret": secrets.token_bytes(32)})
        row = await db.fetchone(Q["secret"], {"name": SECRET_NAME})
        assert row is not None, "the sandbox token secret was just inserted"
        cache.value = bytes(row["secret"])
    return cache.value


def _sign(secret: bytes, sandbox_id: str, tenant_id: str, created_at: datetime) -> str:
    message = f"sandbox\x00{sandbox_id}\x00{tenant_id}\x00{created_at.isoformat()}".encode()
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")


async def token_for(db: Database, cache: SecretCache, sandbox_id: str) -> str | None:
    """The live session's token (None once it is gone)."""
    row = await db.fetchone(Q["live_session"], {"id": sandbox_id})
    if row is None:
        return None
    return _sign(await _secret(db, cache), sandbox_id, row["tenant_id"], row["created_at"])


def is_sandbox_token(value: str | None) -> bool:
    return bool(value) and value.startswith(TOKEN_PREFIX)  # type: ignore[union-attr]


async def tenant_of_token(db: Database, cache: SecretCache, token: str,
                          sandbox_id: str) -> str | None:
    """The tenant of live session ``sandbox_id`` when ``token`` is its token; else None."""
    if not is_sandbox_token(token) or len(token) > MAX_TOKEN_CHARS:
        return None
    row = await db.fetchone(Q["live_session"], {"id": sandbox_id})
    if row is None:
        return None
    expected = _sign(await _secret(db, cache), sandbox_id, row["tenant_id"], row["created_at"])
    return str(row["tenant_id"]) if hmac.compare_digest(expected, token) else None
