"""E2B's control API (``E2B_API_URL`` = ``<onebox>/e2b``): create, connect, info, list,
set timeout, kill. A sandbox is a session of the caller's tenant (runtime/e2b_sandboxes)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import unquote

from fastapi import APIRouter, Query, Request, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from onebox.api.auth import Caller, State
from onebox.api.e2b.deps import e2b_state
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.runtime.e2b import sandboxes
from onebox.runtime.e2b import tokens as sandbox_tokens
from onebox.runtime.e2b.sandboxes import E2bSandbox

router = APIRouter(prefix="/e2b", tags=["e2b"])
ENVD_VERSION = "0.5.7"  # the envd features onebox answers (octet-stream uploads, default user)
SandboxId = Annotated[str, PathParam(max_length=64)]


class NewSandbox(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    template_id: str = Field("base", alias="templateID", max_length=200)
    timeout: int | None = Field(None, ge=1, le=sandboxes.MAX_TIMEOUT_S)
    metadata: dict[str, str] | None = None
    env_vars: dict[str, str] | None = Field(None, alias="envVars")


class Timeout(BaseModel):
    timeout: int = Field(ge=1, le=sandboxes.MAX_TIMEOUT_S)


class ConnectBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    timeout: int | None = Field(None, ge=1, le=sandboxes.MAX_TIMEOUT_S)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


async def _created(sandbox: E2bSandbox, request: Request, state: State) -> dict[str, Any]:
    """E2B's answer to create and connect. ``envdAccessToken`` is the sandbox's own token
    (runtime/sandbox_tokens), never the caller's API key; none is needed with auth off."""
    body: dict[str, Any] = {"templateID": sandbox.template, "sandboxID": sandbox.sandbox_id,
                            "clientID": "onebox", "envdVersion": ENVD_VERSION, "domain": None}
    if state.settings.api.auth:
        token = await sandbox_tokens.token_for(state.db, e2b_state(request).token_secret,
                                               sandbox.sandbox_id)
        if token is None:
            raise NotFound(f"sandbox {sandbox.sandbox_id} ended while it was being connected",
                           field="sandbox_id")
        body["envdAccessToken"] = token
    return body


def _detail(sandbox: E2bSandbox, state: State) -> dict[str, Any]:
    limits = state.settings.sandbox
    end_at = sandbox.end_at or sandbox.started_at
    return {"templateID": sandbox.template, "sandboxID": sandbox.sandbox_id,
            "clientID": "onebox", "envdVersion": ENVD_VERSION, "state": "running",
            "startedAt": _iso(sandbox.started_at), "endAt": _iso(end_at),
            "cpuCount": max(1, int(limits.cpus)), "memoryMB": limits.memory_mb,
            "diskSizeMB": limits.disk_mb, "metadata": sandbox.metadata}


@router.post("/v2/sandboxes", status_code=201, summary="E2B: create a sandbox (a session)")
@router.post("/sandboxes", status_code=201, include_in_schema=False)
async def create(body: NewSandbox, request: Request, state: State,
                 caller: Caller) -> dict[str, Any]:
    sandbox = await sandboxes.create(
        state.db, state.backend, caller.tenant_id, template=body.template_id,
        metadata=body.metadata, timeout_s=body.timeout, envs=body.env_vars,
        holder=state.server_id)
    return await _created(sandbox, request, state)


@router.post("/v2/sandboxes/{sandbox_id}/connect", summary="E2B: connect to a running sandbox")
@router.post("/sandboxes/{sandbox_id}/connect", include_in_schema=False)
async def connect(sandbox_id: SandboxId, body: ConnectBody, request: Request, state: State,
                  caller: Caller) -> dict[str, Any]:
    if body.timeout is not None:
        sandbox = await sandboxes.set_timeout(state.db, sandbox_id, caller.tenant_id,
                                              body.timeout, extend_only=True)
    else:
        sandbox = await sandboxes.require(state.db, sandbox_id, caller.tenant_id)
    return await _created(sandbox, request, state)


@router.get("/sandboxes/{sandbox_id}", summary="E2B: a sandbox's info")
async def info(sandbox_id: SandboxId, request: Request, state: State,
               caller: Caller) -> dict[str, Any]:
    sandbox = await sandboxes.require(state.db, sandbox_id, caller.tenant_id)
    return _detail(sandbox, state)


@router.get("/v2/sandboxes", summary="E2B: the tenant's running sandboxes")
@router.get("/sandboxes", include_in_schema=False)
async def list_sandboxes(
    request: Request, response: Response, state: State, caller: Caller,
    metadata: Annotated[str | None, Query(max_length=4096)] = None,
    sandbox_state: Annotated[str | None, Query(alias="state", max_length=64)] = None,
    template: Annotated[str | None, Query(max_length=200)] = None,
    started_after: Annotated[datetime | None, Query(alias="startedAfter")] = None,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
    limit: Annotated[int, Query(ge=1, le=sandboxes.LIST_MAX)] = sandboxes.LIST_MAX,
    next_token: Annotated[str | None, Query(alias="nextToken", max_length=200)] = None,
) -> list[dict[str, Any]]:
    if sandbox_state and "running" not in sandbox_state.split(","):
        return []  # onebox never pauses a sandbox
    wanted = {unquote(k): unquote(v)
              for k, v in sandboxes.parse_metadata_query(metadata).items()}
    if started_after is not None and started_after.tzinfo is None:
        started_after = started_after.replace(tzinfo=UTC)
    query = sandboxes.ListQuery(wanted, template, started_after, order, limit, next_token)
    page, token = await sandboxes.list_page(state.db, caller.tenant_id, query)
    if token is not None:
        response.headers["x-next-token"] = token
    return [_detail(s, state) for s in page]


@router.post("/sandboxes/{sandbox_id}/timeout", status_code=204, response_class=Response,
             summary="E2B: the sandbox ends this many seconds from now")
async def set_timeout(sandbox_id: SandboxId, body: Timeout, request: Request, state: State,
                      caller: Caller) -> Response:
    await sandboxes.set_timeout(state.db, sandbox_id, caller.tenant_id, body.timeout)
    return Response(status_code=204)


@router.delete("/sandboxes/{sandbox_id}", status_code=204, response_class=Response,
               summary="E2B: kill the sandbox (delete the session and its workspace)")
async def kill(sandbox_id: SandboxId, request: Request, state: State, caller: Caller) -> Response:
    await sandboxes.kill(state.db, state.backend, sandbox_id, caller.tenant_id)
    return Response(status_code=204)


LIFECYCLE = ("a sandbox runs until its timeout or kill(); its workspace can be snapshotted "
             "through /v1/snapshots")
UNSUPPORTED = {  # the last segment of the path: (what onebox does not do, what to do instead)
    "pause": ("pause", LIFECYCLE), "resume": ("resume", LIFECYCLE),
    "snapshots": ("snapshot", LIFECYCLE), "fork": ("fork", LIFECYCLE),
    "metrics": ("report metrics of", "measure inside the sandbox with commands.run()"),
    "logs": ("keep logs of", "each command's output comes back from commands.run()"),
    "network": ("update the network of", "the sandbox's egress is onebox's policy, set when "
                "the server starts (docs/e2b.md)")}


@router.post("/sandboxes/{sandbox_id}/pause", include_in_schema=False)
@router.post("/sandboxes/{sandbox_id}/resume", include_in_schema=False)
@router.post("/sandboxes/{sandbox_id}/snapshots", include_in_schema=False)
@router.post("/sandboxes/{sandbox_id}/fork", include_in_schema=False)
@router.get("/sandboxes/{sandbox_id}/metrics", include_in_schema=False)
@router.get("/sandboxes/{sandbox_id}/logs", include_in_schema=False)
@router.get("/v2/sandboxes/{sandbox_id}/logs", include_in_schema=False)
@router.put("/sandboxes/{sandbox_id}/network", include_in_schema=False)
async def unsupported(sandbox_id: SandboxId, request: Request, state: State,
                      caller: Caller) -> None:
    # another tenant's sandbox is "not found" here too, as on every other route
    await sandboxes.require(state.db, sandbox_id, caller.tenant_id)
    action = request.url.path.rsplit("/", 1)[-1]
    verb, instead = UNSUPPORTED[action]
    message = f"onebox does not {verb} E2B sandboxes: {instead}"
    if action == "pause":  # the SDK reads a 409 on pause as "already paused", and goes on
        raise ValidationError(message, field="sandbox_id")
    raise Conflict(message, field="sandbox_id")


@router.post("/v3/templates", include_in_schema=False)
@router.post("/v2/templates", include_in_schema=False)
@router.post("/templates", include_in_schema=False)
async def build_template(request: Request, state: State, caller: Caller) -> None:
    raise Conflict("onebox does not build E2B templates: build a onebox environment "
                   "(`onebox env build NAME`, docs/environments.md) and pass NAME as the "
                   "template of Sandbox.create()", field="template")
