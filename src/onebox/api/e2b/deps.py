"""Who calls the in-sandbox services, and which sandbox they mean.

The control API authenticates like the rest of the API (E2B's ``X-API-Key`` header holds a
onebox key). Requests to the sandbox carry no API key: the SDK sends the ``envdAccessToken``
the control API returned (``X-Access-Token``), with ``E2b-Sandbox-Id`` and
``E2b-Sandbox-Port``. That token is the sandbox's own (runtime/sandbox_tokens): it opens the
sandbox it was made for and nothing else, and dies with it. An API key is accepted here too
(it holds every right of its tenant anyway). The sandbox must be the key's tenant's; any
other, or one the token does not open, is "not found", as for the sessions API.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fastapi import Request

from onebox.api.auth import principal_of_key
from onebox.api.errors import Unauthorized
from onebox.api.state import ApiState, get_state
from onebox.errors import NotFound, ValidationError
from onebox.runtime.e2b import sandboxes as e2b_sandboxes
from onebox.runtime.e2b import tokens as sandbox_tokens
from onebox.runtime.e2b.commands import E2bProcesses
from onebox.runtime.e2b.tokens import SecretCache

ENVD_PORT = 49983
INTERPRETER_PORT = 49999
SANDBOX_ID = re.compile(r"^api-[0-9a-f]{16}$")


@dataclass
class E2bState:
    processes: E2bProcesses = field(default_factory=E2bProcesses)
    token_secret: SecretCache = field(default_factory=SecretCache)
    sweeper: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class Target:
    """An authenticated call into one sandbox of the caller's tenant."""

    api: ApiState
    e2b: E2bState
    tenant_id: str
    sandbox_id: str
    envs: dict[str, str]  # the sandbox's own (Sandbox.create(envs=...))


def e2b_state(request: Request) -> E2bState:
    state: E2bState | None = getattr(request.app.state, "e2b", None)
    if state is None:
        state = request.app.state.e2b = E2bState()
    return state


def key_of(request: Request) -> str | None:
    """The onebox API key a request carries, however the E2B SDK sent it."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-access-token") or request.headers.get("x-api-key")


async def tenant_of(request: Request, api: ApiState) -> str:
    found = await principal_of_key(api, key_of(request), "set E2B_API_KEY to a onebox API key "
                                   "(`onebox keys create`)")
    return found.tenant_id


async def _tenant_of_sandbox_token(request: Request, api: ApiState, sandbox_id: str) -> str:
    """The tenant of ``sandbox_id`` when the request's access token is that sandbox's."""
    token = request.headers.get("x-access-token", "")
    tenant_id = None
    if api.settings.api.auth:
        tenant_id = await sandbox_tokens.tenant_of_token(
            api.db, e2b_state(request).token_secret, token, sandbox_id)
    if tenant_id is None:
        raise NotFound(f"sandbox {sandbox_id!r} does not exist for this access token: a token "
                       "opens the one sandbox it was made for, while it runs",
                       field="E2b-Sandbox-Id")
    return tenant_id


async def target(request: Request, port: int) -> Target:
    """The caller's sandbox named by ``E2b-Sandbox-Id``, reached on ``E2b-Sandbox-Port``."""
    api = get_state(request)
    sandbox_id = request.headers.get("e2b-sandbox-id", "")
    if sandbox_tokens.is_sandbox_token(request.headers.get("x-access-token")) \
            and SANDBOX_ID.match(sandbox_id):
        tenant_id = await _tenant_of_sandbox_token(request, api, sandbox_id)
    else:
        tenant_id = await tenant_of(request, api)
    if not SANDBOX_ID.match(sandbox_id):
        raise NotFound(f"sandbox {sandbox_id[:64]!r} does not exist: send the E2b-Sandbox-Id "
                       "of a sandbox made with Sandbox.create()", field="E2b-Sandbox-Id")
    asked = request.headers.get("e2b-sandbox-port", str(port))
    if asked != str(port):
        raise ValidationError(f"port {asked[:8]!r} is not served: onebox answers E2B's envd "
                              f"({ENVD_PORT}) and code interpreter ({INTERPRETER_PORT}) only",
                              field="E2b-Sandbox-Port")
    state = e2b_state(request)
    sandbox = await e2b_sandboxes.require(api.db, sandbox_id, tenant_id)
    return Target(api, state, tenant_id, sandbox_id, sandbox.envs)


def recheck(request: Request, port: int) -> tuple[Callable[[], Awaitable[bool]], float]:
    """Whether the caller may still reach its sandbox (its key, tenant and sandbox all still
    there), to ask every ``api.key_recheck_s`` while a stream (a process, a cell) runs."""
    async def allowed() -> bool:
        try:
            await target(request, port)
        except (Unauthorized, NotFound):
            return False
        return True
    return allowed, get_state(request).settings.api.key_recheck_s
