"""/v1/runs: submit, list, inspect, stream, cancel, approve/reject, retry."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Response
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.responses import StreamingResponse

from onebox.api.auth import Caller, State
from onebox.api.errors import body as error_body
from onebox.api.events import Recheck, run_event_stream
from onebox.api.schemas import CreateRun, Decision, ForkRun
from onebox.api.state import ApiState
from onebox.errors import ValidationError
from onebox.runtime.engine import event_log, run_outputs
from onebox.runtime.engine import run_files as inputs_of
from onebox.runtime.services import api_keys, forks, replays, run_compare, tenant_sessions
from onebox.runtime.services import run_service as service
from onebox.runtime.services import runs as runtime_runs
from onebox.runtime.services import session_service as sessions
from onebox.runtime.services.api_keys import Principal
from onebox.runtime.services.runs import PAGE_STEPS

router = APIRouter(prefix="/v1/runs", tags=["runs"])
MAX_PAGE_STEPS = 1000
Status = Literal["PENDING", "RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED", "DEAD"]


@router.post("", status_code=201, summary="Submit a run from a plan (or a task)")
async def create_run(
    body: CreateRun, state: State, caller: Caller, response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> dict[str, Any]:
    inputs = await inputs_of.uploaded(state.db, caller.tenant_id, body.files,
                                      state.settings.runtime)
    submitted = await service.create_run(
        state.db, state.settings, caller.tenant_id, plan=body.plan, task=body.task,
        name=body.name, idempotency_key=body.idempotency_key or idempotency_key,
        profile=body.profile, inputs=inputs)
    if submitted.existing:
        response.status_code = 200
    return {"run_id": submitted.run_id, "trace_id": submitted.trace_id,
            "existing": submitted.existing}


@router.get("", summary="List runs, newest first, filtered by status, time and text; "
            "each with answer_preview (the first 200 characters of its answer)")
async def list_runs(
    state: State, caller: Caller,
    status: Annotated[list[Status] | None, Query(max_length=7)] = None,
    since: datetime | None = None, until: datetime | None = None,
    q: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")] = None,
    before: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    runs = await service.search_runs(state.db, caller.tenant_id, statuses=list(status or []),
                                     since=since, until=until, text=q, before=before,
                                     limit=limit)
    return {"runs": runs}


PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE_STEPS,
                                 description="step attempts per page")]
PageAfter = Annotated[str | None, Query(max_length=20, pattern=r"^[0-9]{1,9}\.[0-9]{1,9}$",
                                        description="the `next` cursor of the previous page")]


@router.get("/{run_id}", summary="One run (run.answer: its final answer, or null), its "
            "summary, plan versions and a page of step attempts")
async def get_run(run_id: uuid.UUID, state: State, caller: Caller,
                  limit: PageLimit = PAGE_STEPS, after: PageAfter = None) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    return await service.run_detail(state.db, run_id, limit=limit, after=after)


@router.get("/{run_id}/steps", summary="A page of step attempts with code, stdout/stderr, files")
async def get_steps(run_id: uuid.UUID, state: State, caller: Caller,
                    limit: PageLimit = PAGE_STEPS, after: PageAfter = None) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    return await service.steps_view_page(state.db, run_id, limit=limit, after=after)


@router.get("/{run_id}/events", summary="The run's events after a sequence number (JSON)")
async def get_events(
    run_id: uuid.UUID, state: State, caller: Caller,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    horizon = await state.hub.ready_horizon()
    events = await event_log.run_events_between(state.db, run_id, after, horizon, limit)
    return {"events": events, "horizon": horizon}


@router.get("/{run_id}/events/stream", summary="Server-sent events of the run, live",
            response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def stream_events(
    run_id: uuid.UUID, state: State, caller: Caller,
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
    after: Annotated[int | None, Query(ge=0, le=2**62)] = None,
) -> StreamingResponse:
    await service.require_run(state.db, run_id, caller.tenant_id)
    start = after or 0
    if last_event_id:
        start = _event_seq(last_event_id)
    events = run_event_stream(state.hub, run_id, start, state.settings.api.heartbeat_s,
                              key_recheck(state, caller))
    stream = _sse(events)
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def key_recheck(state: ApiState, caller: Principal) -> Recheck | None:
    """An open stream ends within api.key_recheck_s of its API key's revocation."""
    key_id = caller.key_id
    if key_id is None:
        return None
    return Recheck(partial(api_keys.is_active, state.db, key_id), state.settings.api.key_recheck_s)


async def _sse(events: AsyncIterator[dict[str, Any] | None]) -> AsyncIterator[str]:
    yield "retry: 1000\n\n"
    async for event in events:
        if event is None:
            yield ": keep-alive\n\n"
            continue
        data = json.dumps(jsonable_encoder(event), separators=(",", ":"))
        yield f"id: {event['seq']}\nevent: {event['type']}\ndata: {data}\n\n"
    revoked = json.dumps(error_body("unauthorized", "this API key was revoked; the stream ends here"))
    yield f"event: revoked\ndata: {revoked}\n\n"


@router.post("/{run_id}/cancel", summary="Cancel an unfinished run")
async def cancel(run_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    await runtime_runs.cancel_run(state.db, run_id, reason=f"cancelled by {caller.label}")
    return {"run_id": run_id, "status": "CANCELLED"}


async def _decide(run_id: uuid.UUID, step_id: str, approve: bool, body: Decision | None,
                  state: State, caller: Caller) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    by = f"{body.by} via {caller.label}" if body and body.by else caller.label
    status = await runtime_runs.approve_step(
        state.db, state.settings, run_id, step_id, approve=approve, by=by,
        comment=body.comment if body else None)
    return {"run_id": run_id, "step_id": step_id, "approved": approve, "status": status}


StepId = Annotated[str, PathParam(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]


@router.post("/{run_id}/steps/{step_id}/approve", summary="Approve a waiting approval step")
async def approve(run_id: uuid.UUID, step_id: StepId, state: State, caller: Caller,
                  body: Decision | None = None) -> dict[str, Any]:
    return await _decide(run_id, step_id, True, body, state, caller)


@router.post("/{run_id}/steps/{step_id}/reject", summary="Reject a waiting approval step")
async def reject(run_id: uuid.UUID, step_id: StepId, state: State, caller: Caller,
                 body: Decision | None = None) -> dict[str, Any]:
    return await _decide(run_id, step_id, False, body, state, caller)


@router.post("/{run_id}/fork", status_code=201, summary="Fork a finished run at a step: "
             "keep what finished before it and go on from it with a change")
async def fork(run_id: uuid.UUID, body: ForkRun, state: State, caller: Caller) -> dict[str, Any]:
    forked = await forks.fork_run(state.db, state.settings, run_id, caller.tenant_id,
                                  at=body.at, plan=body.plan, changes=body.set,
                                  profile=body.profile)
    return forks.fork_json(forked)


@router.post("/{run_id}/replay", summary="Re-run every code step of a finished run from "
             "its own before-step snapshot (no model is asked) and report the matches",
             responses={202: {"description": "the replay run is still running after `wait_s`:"
                              " the report so far (poll GET /v1/runs/{replay_run_id})"}})
async def replay(run_id: uuid.UUID, state: State, caller: Caller, response: Response,
                 wait_s: Annotated[float, Query(ge=0, le=600, description=(
                     "how long to wait for the replay run (workers execute it) before "
                     "answering with the report so far"))] = 120.0) -> dict[str, Any]:
    replay_id = await replays.queue_replay(state.db, run_id, caller.tenant_id)
    report = await replays.wait_for_replay(state.db, replay_id, caller.tenant_id, wait_s)
    if not replays.ended(report):
        response.status_code = 202
    return report


@router.get("/{run_id}/replay-report", summary="What a replay run found, so far while it "
            "runs: per step whether it was re-executed and matched, the first difference")
async def replay_report(run_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    return await replays.replay_report(state.db, run_id, caller.tenant_id)


@router.get("/{run_id}/compare/{other_id}", summary="Two runs step by step: status, "
            "output, files each step wrote, model calls")
async def compare(run_id: uuid.UUID, other_id: uuid.UUID, state: State,
                  caller: Caller) -> dict[str, Any]:
    return await run_compare.diff_runs(state.db, state.objects(), run_id, other_id,
                                       caller.tenant_id)


@router.post("/{run_id}/retry", summary="Queue the failed steps of a DEAD run again")
async def retry(run_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    queued = await runtime_runs.retry_run(state.db, state.settings, run_id)
    return {"run_id": run_id, "queued_steps": queued}


@router.get("/{run_id}/files", summary="Files in the run's workspace")
async def run_files(run_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    session_id = await service.workspace_session(state.db, run_id, caller.tenant_id)
    return {"files": await sessions.files_of(state.backend, session_id)}


@router.get("/{run_id}/files/{path:path}", summary="Download a file of the run's workspace",
            response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}}}})
async def run_file(run_id: uuid.UUID, path: str, state: State, caller: Caller) -> Response:
    session_id = await service.workspace_session(state.db, run_id, caller.tenant_id)
    data = await sessions.download(state.backend, session_id, path)
    return Response(data, media_type="application/octet-stream")


@router.get("/{run_id}/artifacts", summary="The files a run kept (manifest), or ?zip=1 for "
            "a zip of them with manifest.json",
            responses={200: {"content": {"application/zip": {}}}})
async def artifacts(run_id: uuid.UUID, state: State, caller: Caller,
                    zip: Annotated[bool, Query()] = False) -> Any:
    await service.require_run(state.db, run_id, caller.tenant_id)
    if zip:
        data = await run_outputs.artifacts_zip(state.db, state.objects(), run_id)
        return Response(data, media_type="application/zip", headers={
            "Content-Disposition": f'attachment; filename="run-{run_id}.zip"'})
    return {"run_id": run_id, "files": await run_outputs.manifest(state.db, run_id)}


@router.get("/{run_id}/artifacts/{path:path}", summary="One file the run kept",
            response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}}}})
async def artifact(run_id: uuid.UUID, path: str, state: State, caller: Caller) -> Response:
    await service.require_run(state.db, run_id, caller.tenant_id)
    data = await run_outputs.artifact(state.db, state.objects(), run_id, path)
    return Response(data, media_type="application/octet-stream")


@router.get("/{run_id}/snapshots", summary="Workspace snapshots taken during the run")
async def run_snapshots(run_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    await service.require_run(state.db, run_id, caller.tenant_id)
    rows = await tenant_sessions.tenant_snapshots(state.db, caller.tenant_id, run_id=run_id,
                                                  session_id=None, limit=500)
    return {"snapshots": rows}


def _event_seq(header: str) -> int:
    """Last-Event-ID as an event seq: ASCII digits only ("²".isdigit() is true, int() of
    it is not), and within the seq column's range."""
    text = header.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise ValidationError(f"Last-Event-ID {header!r} must be an event seq: a number as "
                              "sent in an event's id: line", field="Last-Event-ID")
    return int(text)
