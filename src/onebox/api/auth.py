"""Who is calling: an API key (``Authorization: Bearer obx_...`` or ``X-API-Key``) -> a tenant.

With ``api.auth`` off (loopback only: the app refuses to start otherwise and answers
421 to a non-loopback Host header, see ``hosts.py``) every caller is the ``default`` tenant.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from onebox.api.errors import Unauthorized
from onebox.api.state import ApiState, get_state
from onebox.runtime.services.api_keys import Principal, authenticate

DEFAULT_TENANT = "default"
_bearer = HTTPBearer(auto_error=False, description="an API key from `onebox keys create`")
_header = APIKeyHeader(name="X-API-Key", auto_error=False)


async def principal(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header_key: Annotated[str | None, Depends(_header)],
) -> Principal:
    key = bearer.credentials if bearer is not None else header_key
    return await principal_of_key(get_state(request), key, "send 'Authorization: Bearer <key>' "
                                  "(create one with `onebox keys create`)")


async def principal_of_key(state: ApiState, key: str | None, how_to_send: str) -> Principal:
    """The key's principal (``default`` with auth off); Unauthorized, saying ``how_to_send``
    a key, when there is none, or when it is unknown or revoked. Every door checks keys here."""
    if not state.settings.api.auth:
        return Principal(None, DEFAULT_TENANT)
    if not key:
        raise Unauthorized(f"an API key is required: {how_to_send}")
    found = await authenticate(state.db, key)
    if found is None:
        raise Unauthorized("this API key is unknown or revoked; `onebox keys list` shows the "
                           "active ones")
    return found


Caller = Annotated[Principal, Depends(principal)]
State = Annotated[ApiState, Depends(get_state)]
