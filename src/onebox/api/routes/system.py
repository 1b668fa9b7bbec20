"""Health, readiness, Prometheus metrics and the tool catalog."""

from __future__ import annotations

import dataclasses
import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse

from onebox.api.auth import Caller, State
from onebox.api.metrics import render_metrics
from onebox.runtime.agent.tools import catalog_tools, ranked_tools
from onebox.runtime.services.metrics import database_answers

log = logging.getLogger(__name__)

router = APIRouter()


@router.get("/healthz", tags=["system"], summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["system"], summary="The database, the sandbox and (under `onebox "
            "up`) the in-process worker answer; 503 naming what does not")
async def readyz(state: State) -> JSONResponse:
    checks: dict[str, Any] = {}
    try:
        await database_answers(state.db)
        checks["database"] = "ok"
    except Exception as exc:  # readiness reports any failure instead of raising it
        log.warning("readiness: the database does not answer", exc_info=True)
        checks["database"] = f"error: {type(exc).__name__}"
    health = state.backend.health()
    checks["sandbox"] = "ok" if health.ok else "; ".join(health.problems) or "unavailable"
    if state.worker_task is not None:
        checks["worker"] = state.worker_problem() or "ok"
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ready" if ready else "not ready", "checks": checks,
                         "backend": health.backend, "isolation": health.isolation},
                        status_code=200 if ready else 503)


@router.get("/metrics", tags=["system"], response_class=PlainTextResponse,
            summary="Prometheus metrics: machine totals, and the caller's tenant's runs, sessions, "
            "step durations and blocked network attempts")
async def metrics(state: State, caller: Caller) -> PlainTextResponse:
    text = await render_metrics(state.db, state.backend, state.hub, caller.tenant_id)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


@router.get("/v1/tools", tags=["tools"], summary="The tool catalog")
async def tools(state: State, caller: Caller) -> dict[str, Any]:
    found = await catalog_tools(state.db)
    return {"tools": [t.model_dump(mode="json") for t in found]}


@router.get("/v1/tools/rank", tags=["tools"],
            summary="Tools for a file format within a cost class, best success rate first")
async def rank_tools(
    state: State, caller: Caller,
    format: Annotated[str, Query(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9._-]+$")],
    max_cost: Literal["FREE", "LOW", "MEDIUM", "HIGH"] = "HIGH",
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict[str, Any]:
    ranked = await ranked_tools(state.db, format=format.lower(), max_cost=max_cost,
                                limit=limit)
    return {"format": format.lower(), "tools": [dataclasses.asdict(t) for t in ranked]}
