"""Helpers shared by the API tests."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

from onebox.config import Settings
from onebox.runtime.service import Runtime


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
