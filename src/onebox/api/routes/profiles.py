"""/v1/profiles: the tenant's agent profiles (provider, model, defaults); /v1/providers: the
model providers the operator declared, which profiles choose among (names and models only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from onebox.api.auth import Caller, State
from onebox.api.schemas import JsonObject
from onebox.runtime.models import profiles as service
from onebox.runtime.models import providers as declared_providers

router = APIRouter(prefix="/v1/profiles", tags=["profiles"])
providers_router = APIRouter(prefix="/v1/providers", tags=["profiles"])


@providers_router.get("", summary="The model providers a profile may name")
async def list_providers(state: State, caller: Caller) -> dict[str, Any]:
    async with state.db.connection() as conn:
        found = await declared_providers.declared(conn, state.settings)
    return {"providers": [p.public() for p in found.values()]}


@router.get("", summary="List the tenant's agent profiles")
async def list_profiles(state: State, caller: Caller) -> dict[str, Any]:
    async with state.db.connection() as conn:
        return {"profiles": await service.list_profiles(conn, caller.tenant_id)}


@router.get("/{name}", summary="One agent profile")
async def get_profile(name: str, state: State, caller: Caller) -> dict[str, Any]:
    async with state.db.connection() as conn:
        return await service.get_profile(conn, caller.tenant_id, name)


@router.put("/{name}", summary="Create or replace an agent profile")
async def put_profile(name: str, body: JsonObject, state: State, caller: Caller,
                      response: Response) -> dict[str, Any]:
    profile = service.parse_profile({**body, "name": name})
    async with state.db.connection() as conn:
        saved = await service.save_profile(conn, state.settings, caller.tenant_id, profile)
    response.status_code = 200
    return saved


@router.delete("/{name}", status_code=204, summary="Delete an agent profile")
async def delete_profile(name: str, state: State, caller: Caller) -> None:
    async with state.db.connection() as conn:
        await service.delete_profile(conn, caller.tenant_id, name)
