"""/v1/environments: the tenant's package environments (built with pip inside a sandbox)."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from onebox.api.auth import Caller, State
from onebox.runtime.environments import service

router = APIRouter(prefix="/v1/environments", tags=["environments"])
log = logging.getLogger(__name__)
Name = Annotated[str, PathParam(pattern=service.NAME)]
_building: set[asyncio.Task[Any]] = set()  # background builds (wait=false), kept referenced


class BuildEnvironment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=service.NAME)
    packages: list[str] = Field(default_factory=list, max_length=100)
    wait: bool = Field(True, description="answer when the build ends; false: 202 at once, "
                       "then GET /v1/environments/{name} until its status is READY or FAILED")


@router.get("", summary="The latest version of each of the tenant's environments")
async def list_environments(state: State, caller: Caller) -> dict[str, Any]:
    return {"environments": await service.list_environments(state.db, caller.tenant_id)}


@router.post("", status_code=201, summary="Build an environment (or reuse the same list's)")
async def build_environment(body: BuildEnvironment, state: State, caller: Caller,
                            response: Response) -> dict[str, Any]:
    service.check_build(body.name, body.packages)  # bad input: 422 now, never a 202
    build = service.build(state.db, state.backend, state.settings, caller.tenant_id,
                          body.name, body.packages)
    if body.wait:
        return await build
    task = asyncio.create_task(build)
    _building.add(task)
    task.add_done_callback(_built)
    response.status_code = 202
    return {"name": body.name, "status": "BUILDING"}


def _built(task: asyncio.Task[Any]) -> None:
    _building.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("environment build failed: %s", task.exception())


@router.get("/{name}", summary="One environment: its latest version and its versions")
async def get_environment(name: Name, state: State, caller: Caller) -> dict[str, Any]:
    return await service.show(state.db, caller.tenant_id, name)


@router.delete("/{name}", summary="Delete every version (refused while a profile uses it)")
async def delete_environment(name: Name, state: State, caller: Caller) -> dict[str, Any]:
    return await service.remove(state.db, state.settings, caller.tenant_id, name)
