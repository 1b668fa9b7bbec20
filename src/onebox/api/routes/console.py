"""What the console needs beyond the run API: a run's model calls (prompt and reply on
demand), its input files, and a plan typed as YAML turned into the plan document
`POST /v1/runs` takes."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import yaml
from fastapi import APIRouter, Query
from fastapi import Path as PathParam

from onebox.agent.plan import parse_plan
from onebox.api.auth import Caller, State
from onebox.api.schemas import Body, text
from onebox.bounds import load_yaml
from onebox.errors import PlanError
from onebox.runtime.engine import run_files
from onebox.runtime.services import console_views, workspace_diff
from onebox.runtime.services import run_service as service

router = APIRouter(tags=["console"])
CallId = Annotated[int, PathParam(ge=1, le=2**62)]


class PlanText(Body):
    """A plan as written in a plan file: YAML (or JSON, which YAML reads too)."""

    text: text(1_000_000, 1)  # type: ignore[valid-type]


@router.get("/v1/runs/{run_id}/model-calls",
            summary="The run's model calls: purpose, model, tokens, cost, latency")
async def list_model_calls(run_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    return {"model_calls": await console_views.model_calls(state.db, run_id)}


@router.get("/v1/runs/{run_id}/model-calls/{call_id}",
            summary="One model call with its prompt (messages) and reply")
async def get_model_call(run_id: uuid.UUID, call_id: CallId, state: State,
                         caller: Caller) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    return await console_views.model_call(state.db, run_id, call_id)


@router.get("/v1/runs/{run_id}/inputs",
            summary="The files the run was given (POST /v1/uploads ids named in `files`)")
async def list_inputs(run_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    rows = await run_files.listed(state.db, run_id, "input")
    return {"inputs": [{"path": r["path"], "sha256": r["sha256"], "size_bytes": r["size_bytes"]}
                       for r in rows]}


@router.get("/v1/runs/{run_id}/diff",
            summary="The workspace between two step attempts (from their snapshots): files "
            "added, removed, changed, with a unified diff of small text files")
async def diff_workspace(
    run_id: uuid.UUID, state: State, caller: Caller,
    to: Annotated[uuid.UUID | None, Query(description="execution id; default: the run's "
                                          "newest step attempt with a snapshot")] = None,
    from_: Annotated[uuid.UUID | None, Query(alias="from", description="execution id; "
                                             "default: the workspace just before `to`")] = None,
) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    found = await workspace_diff.between(state.db, state.objects(), run_id,
                                         to_execution=to, from_execution=from_)
    return found.to_json()


@router.post("/v1/plans/parse", summary="Read a YAML plan and check it; returns the plan document")
async def parse_plan_text(body: PlanText, state: State, caller: Caller) -> dict[str, Any]:
    try:
        document = load_yaml(body.text, what="the plan")
    except yaml.YAMLError as exc:
        raise PlanError(f"the plan is not valid YAML: {exc}", field="text") from exc
    if not isinstance(document, dict):
        raise PlanError("a plan is a mapping with `steps:` (and optionally `name:`)",
                        field="text")
    parse_plan(document)
    return {"plan": document}
