"""The HTTP service: ``create_app(settings)`` builds the FastAPI app (API + web console).

    app = create_app(settings)                  # opens the runtime at start-up
    app = create_app(settings, runtime=rt)      # use a runtime the caller owns
    app = create_app(settings, worker=True)     # `onebox up`: also run steps in-process

Routers stay thin: they check the caller's tenant and call the runtime,
knowledge and sandbox functions the CLI uses too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from onebox.api import session_routing
from onebox.api.bounds import JsonDepthLimit
from onebox.api.e2b import router as e2b_router
from onebox.api.errors import BodyLimit, SecurityHeaders, install_error_handlers
from onebox.api.events import EventHub
from onebox.api.hosts import LoopbackHostOnly, check_no_auth_binding
from onebox.api.routes import (
    console,
    environments,
    knowledge,
    profiles,
    runs,
    sessions,
    system,
    threads,
    uploads,
)
from onebox.api.session_routing import SessionRouter
from onebox.api.state import ApiState
from onebox.config import Settings
from onebox.llm.embedding import EmbeddingModel
from onebox.peers import OperatorPeerOnly
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.service import Runtime

log = logging.getLogger(__name__)
API_VERSION = "1"


def web_dir() -> Path:
    return Path(str(resources.files("onebox").joinpath("web")))


def create_app(
    settings: Settings,
    runtime: Runtime | None = None,
    *,
    worker: bool = False,
    embedding: EmbeddingModel | None = None,
) -> FastAPI:
    """The API and console. Without ``runtime`` one is opened (and closed) with the app."""
    check_no_auth_binding(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state: ApiState | None = getattr(app.state, "onebox", None)
        if state is None:
            rt = await Runtime.open(settings)
            state = _state(settings, rt, embedding, owns=True)
            app.state.onebox = state
        stop = asyncio.Event()
        keepers = []
        if await session_routing.join(state):
            keepers = [asyncio.create_task(session_routing.keep_joined(state, stop)),
                       asyncio.create_task(session_routing.keep_snapshotted(state, stop))]
        if worker:
            state.worker_task = asyncio.create_task(_work(state, stop))
            state.worker_task.add_done_callback(partial(_worker_ended, stop))
        try:
            yield
        finally:
            stop.set()
            if state.worker_task is not None:
                await _stopped(state.worker_task)
            await asyncio.gather(*keepers)
            await session_routing.leave(state)
            await state.close()

    app = FastAPI(
        title="onebox", version=API_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
        description="One agent, one sandbox, one database: runs, live events, sessions, "
        "knowledge and memory. Authenticate with `Authorization: Bearer <API key>`.",
    )
    if runtime is not None:
        app.state.onebox = _state(settings, runtime, embedding, owns=False)
    install_error_handlers(app)
    for module in (runs, sessions, knowledge, profiles, system, console, uploads,
                   environments):
        app.include_router(module.router)
    app.include_router(profiles.providers_router)
    app.include_router(threads.router)
    app.include_router(e2b_router)  # E2B compatibility: /e2b/...
    app.mount("/ui", StaticFiles(directory=web_dir(), html=True), name="ui")

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    app.add_middleware(SessionRouter)  # innermost: a forwarded body was bounded already
    app.add_middleware(JsonDepthLimit)  # inside BodyLimit: it reads a bounded body
    app.add_middleware(BodyLimit, max_bytes=settings.api.max_request_bytes,
                       max_upload_bytes=settings.api.max_upload_bytes)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(LoopbackHostOnly, settings=settings)
    app.add_middleware(OperatorPeerOnly, settings=settings)  # outermost: before anything else
    return app


def _state(settings: Settings, runtime: Runtime, embedding: EmbeddingModel | None,
           *, owns: bool) -> ApiState:
    hub = EventHub(runtime.db, poll_s=settings.api.events_poll_s)
    return ApiState(settings, runtime, hub, owns_runtime=owns, embedding=embedding)


def _worker_ended(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    """An in-process worker that ends before the server is stopped is an outage: log it
    (with its exception) and let /readyz answer 503 from now on."""
    if stop.is_set():
        return
    exc = None if task.cancelled() else task.exception()
    log.error("the in-process worker stopped while the server runs; steps are no longer run "
              "here (/readyz now answers 503): %s", exc or "cancelled", exc_info=exc)


async def _stopped(task: asyncio.Task[None]) -> None:
    """Wait for the in-process worker to drain; a failure while draining is logged, not lost
    (the server is stopping either way)."""
    try:
        await task
    except asyncio.CancelledError:
        log.info("the in-process worker was cancelled while the server stopped")
    except Exception:
        log.exception("the in-process worker failed while the server stopped")


async def _work(state: ApiState, stop: asyncio.Event) -> None:
    """`onebox up`: a worker in this process, sharing the runtime's database and sandbox."""
    runner = Worker(state.db, state.backend, state.settings, objects=state.objects())
    log.info("worker %s started in the API process", runner.owner)
    await runner.serve(stop, drain_s=5.0)
