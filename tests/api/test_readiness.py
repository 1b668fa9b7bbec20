"""`onebox up`: an in-process worker that dies makes /readyz fail and is logged, never silent."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from api_helpers import serving

from onebox.api import app as app_module
from onebox.api import create_app
from onebox.config import Settings
from onebox.runtime.services.service import Runtime
from onebox.store.db import Database


class _CrashingWorker:
    """Stands in for the runtime's Worker: its serve loop dies at once, as a bug would."""

    owner = "crashing-worker"

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    async def serve(self, stop: asyncio.Event, drain_s: float) -> None:
        raise RuntimeError("the worker loop broke")


async def test_readyz_fails_and_the_log_says_why_when_the_worker_dies(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from onebox.sandbox.registry import get_backend

    backend = get_backend(settings)
    rt = Runtime(settings, db, backend)
    monkeypatch.setattr(app_module, "Worker", _CrashingWorker)
    caplog.set_level(logging.ERROR, logger="onebox.api.app")
    try:
        async with serving(create_app(settings, runtime=rt, worker=True)) as url, \
                httpx.AsyncClient(base_url=url) as client:
            await asyncio.sleep(0.1)
            ready = await client.get("/readyz")
    finally:
        await backend.close()
        await rt.objects.close()
    assert ready.status_code == 503
    assert ready.json()["checks"]["worker"] == "stopped: RuntimeError: the worker loop broke"
    assert any("in-process worker stopped" in r.getMessage() for r in caplog.records)


async def test_readyz_is_ready_with_a_live_worker(db: Database, settings: Settings) -> None:
    from onebox.sandbox.registry import get_backend

    settings.runtime.poll_s = 0.1
    backend = get_backend(settings)
    rt = Runtime(settings, db, backend)
    try:
        async with serving(create_app(settings, runtime=rt, worker=True)) as url, \
                httpx.AsyncClient(base_url=url) as client:
            ready = await client.get("/readyz")
    finally:
        await backend.close()
        await rt.objects.close()
    assert ready.status_code == 200 and ready.json()["checks"]["worker"] == "ok"
