"""/v1/threads: conversations that remember; a message is a turn, its run streamed over SSE."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Header, Response
from fastapi.responses import StreamingResponse
from pydantic import Field

from onebox.api.auth import Caller, State
from onebox.api.events import run_event_stream
from onebox.api.routes.runs import _sse, key_recheck
from onebox.api.schemas import Body, Name, text
from onebox.runtime.threads import forking
from onebox.runtime.threads import service as threads

router = APIRouter(prefix="/v1/threads", tags=["threads"])


class CreateThread(Body):
    title: text(threads.MAX_TITLE_CHARS) = ""  # type: ignore[valid-type]
    profile: Name | None = None  # type: ignore[valid-type]


class PostMessage(Body):
    message: text(threads.MAX_MESSAGE_CHARS, 1)  # type: ignore[valid-type]


class ForkThread(Body):
    """Fork at ``turn``: the turns before it are kept; ``message`` (default: what was said
    at that turn) is posted as that turn in the fork, under ``profile`` if given."""

    turn: int = Field(ge=1)
    message: text(threads.MAX_MESSAGE_CHARS, 1) | None = None  # type: ignore[valid-type]
    profile: Name | None = None  # type: ignore[valid-type]
    post: bool = True


@router.post("", status_code=201, summary="Start a thread (optionally with an agent profile)")
async def create_thread(body: CreateThread, state: State, caller: Caller) -> dict[str, Any]:
    thread = await threads.create_thread(state.db, state.settings, caller.tenant_id,
                                         title=body.title, profile=body.profile)
    return thread.to_dict()


@router.get("", summary="The tenant's threads, most recently used first")
async def list_threads(state: State, caller: Caller) -> dict[str, Any]:
    found = await threads.list_threads(state.db, caller.tenant_id)
    return {"threads": [t.to_dict() for t in found]}


@router.get("/{thread_id}", summary="A thread and its turns: message, run, status, answer, "
            "and what went into each turn's context (memory ids, summary version, tokens)")
async def get_thread(thread_id: uuid.UUID, state: State, caller: Caller) -> dict[str, Any]:
    return await threads.show_thread(state.db, caller.tenant_id, thread_id)


@router.delete("/{thread_id}", status_code=204, response_class=Response,
               summary="Delete a thread, its turns and its memories (its runs stay)")
async def delete_thread(thread_id: uuid.UUID, state: State, caller: Caller) -> Response:
    await threads.remove_thread(state.db, await state.knowledge(), caller.tenant_id, thread_id)
    return Response(status_code=204)


@router.post("/{thread_id}/fork", status_code=201, summary="Fork a thread at a turn: a new "
             "thread with the conversation before it (turns, memory, summary, workspace), "
             "that turn posted again in it")
async def fork_thread(thread_id: uuid.UUID, body: ForkThread, state: State,
                      caller: Caller) -> dict[str, Any]:
    forked = await forking.fork_thread(
        state.db, state.settings, await state.knowledge(), caller.tenant_id, thread_id,
        turn=body.turn, message=body.message, profile=body.profile, post=body.post)
    posted = forked.posted
    return {"thread": forked.thread.to_dict(), "copied_turns": forked.copied_turns,
            "memories": forked.memories, "turn": posted and posted.turn,
            "run_id": posted and posted.run_id}


@router.post("/{thread_id}/messages", status_code=201, response_model=None,
             summary="Post a message: a turn, run in the thread's workspace. With "
             "`Accept: text/event-stream` the response is the run's events, live (as "
             "/v1/runs/{id}/events/stream); otherwise the turn's run id and context.",
             responses={201: {"content": {"text/event-stream": {}}}})
async def post_message(
    thread_id: uuid.UUID, body: PostMessage, state: State, caller: Caller,
    accept: Annotated[str | None, Header(max_length=500)] = None,
) -> dict[str, Any] | StreamingResponse:
    posted = await threads.post_message(state.db, state.settings, await state.knowledge(),
                                        caller.tenant_id, thread_id, body.message)
    if "text/event-stream" not in (accept or ""):
        return {"thread_id": posted.thread_id, "turn": posted.turn, "run_id": posted.run_id,
                "context": posted.context.to_record(),
                "events": f"/v1/runs/{posted.run_id}/events/stream"}
    events = run_event_stream(state.hub, posted.run_id, 0, state.settings.api.heartbeat_s,
                              key_recheck(state, caller))
    return StreamingResponse(_sse(events), status_code=201, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                                      "X-Onebox-Run-Id": str(posted.run_id)})
