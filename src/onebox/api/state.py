"""What every request handler needs, opened once per app: the runtime, knowledge, objects, events."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx
from fastapi import Request

from onebox.api.events import EventHub
from onebox.config import Settings
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import EmbeddingModel, embedding_model_from_settings
from onebox.objects import ObjectStore
from onebox.runtime.services.service import Runtime
from onebox.runtime.services.session_holders import ServerIdentity
from onebox.sandbox.base import SandboxBackend
from onebox.store.db import Database


@dataclass
class ApiState:
    settings: Settings
    runtime: Runtime
    hub: EventHub
    owns_runtime: bool = False
    embedding: EmbeddingModel | None = None
    _knowledge: Knowledge | None = None
    _embedding: EmbeddingModel | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    worker_task: asyncio.Task[None] | None = None  # `onebox up`'s in-process worker
    server: ServerIdentity | None = None  # this server in onebox.api_servers, while it serves
    cluster_key: bytes | None = None  # signs and checks forwarded requests (a member's only)
    # time.monotonic() until which every session with a copy here is held here (set by a
    # heartbeat and sweep: no other server can take one before this server's lease ends)
    local_is_mine_until: float = 0.0
    _forwarding: httpx.AsyncClient | None = None

    def worker_problem(self) -> str | None:
        """Why the in-process worker is not running, or None (also when there is none)."""
        task = self.worker_task
        if task is None or not task.done():
            return None
        if task.cancelled():
            return "stopped: cancelled"
        exc = task.exception()
        return f"stopped: {type(exc).__name__}: {exc}" if exc else "stopped"

    @property
    def db(self) -> Database:
        return self.runtime.db

    @property
    def backend(self) -> SandboxBackend:
        return self.runtime.backend

    async def knowledge(self) -> Knowledge:
        """The knowledge base, built on first use (loading the embedding model takes a while)."""
        async with self._lock:
            if self._knowledge is None:
                model = self.embedding
                if model is None:
                    model = self._embedding = embedding_model_from_settings(self.settings)
                self._knowledge = Knowledge.build(self.db, model, self.settings)
            return self._knowledge

    def objects(self) -> ObjectStore:
        return self.runtime.objects

    @property
    def server_id(self) -> str | None:
        """This server's id while it serves (the holder of the sessions it creates)."""
        return None if self.server is None else self.server.id

    def forwarding_client(self) -> httpx.AsyncClient:
        """The client that forwards a session's requests to its holder (api/session_routing):
        no read deadline (a cell may run for minutes, a stream for hours), no redirects, no
        proxy from the environment."""
        if self._forwarding is None:
            self._forwarding = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=5.0), follow_redirects=False,
                trust_env=False)
        return self._forwarding

    async def close(self) -> None:
        await self.hub.close()
        if self._forwarding is not None:
            await self._forwarding.aclose()
        if self._embedding is not None:
            await self._embedding.close()
        if self.owns_runtime:
            await self.runtime.close()


def get_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.onebox
    return state
