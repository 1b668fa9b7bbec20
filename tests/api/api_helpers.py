"""Helpers shared by the API tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from onebox.config import Settings
from onebox.runtime.services.service import Runtime


@dataclass
class Api:
    url: str
    rt: Runtime
    keys: dict[str, str]
    settings: Settings
    e5: Any = None
    model: Any = None

    def client(self, tenant: str | None = "acme", **kwargs: object) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, **kwargs)


async def wait_status(client: httpx.AsyncClient, run_id: str, *statuses: str,
                      timeout_s: float = 60) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        detail = (await client.get(f"/v1/runs/{run_id}")).json()
        if detail["run"]["status"] in statuses:
            return detail
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"run {run_id} stayed {detail['run']['status']}")
        await asyncio.sleep(0.1)


async def read_sse(response: httpx.Response, until: str, limit: int = 500) -> list[dict]:
    """Parse server-sent events until one of type ``until`` (or ``limit`` events)."""
    events: list[dict] = []
    current: dict = {}
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            current["id"] = int(line[4:])
        elif line.startswith("event: "):
            current["event"] = line[7:]
        elif line.startswith("data: "):
            current["data"] = json.loads(line[6:])
        elif line == "" and current:
            events.append(current)
            if current.get("event") == until or len(events) >= limit:
                return events
            current = {}
    return events


async def start_server(app: object, port: int = 0) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    """uvicorn serving ``app`` on 127.0.0.1 (``port`` 0: a free one), started; its URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",  # type: ignore[arg-type]
                            lifespan="on")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    return server, task, f"http://127.0.0.1:{bound}"


@contextlib.asynccontextmanager
async def serving(app: object) -> AsyncIterator[str]:
    server, task, url = await start_server(app)
    try:
        yield url
    finally:
        server.should_exit = True
        await task
