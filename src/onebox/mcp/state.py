"""What every MCP tool call needs: the runtime, the knowledge base (built on first use), the
caller's tenant, and the in-process worker that runs the runs it submits."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from onebox.config import Settings
from onebox.errors import OneboxError
from onebox.knowledge.collections import CLI_TENANT
from onebox.knowledge.service import Knowledge
from onebox.llm.embedding import EmbeddingModel, embedding_model_from_settings
from onebox.runtime.engine.worker import Worker
from onebox.runtime.services import api_keys
from onebox.runtime.services.service import Runtime

log = logging.getLogger(__name__)
WORKER_DRAIN_S = 5.0


class Unauthorized(OneboxError):
    """An HTTP MCP call without a valid API key."""

    code = "unauthorized"
    http_status = 401


@dataclass
class McpState:
    settings: Settings
    runtime: Runtime
    auth: bool = False  # HTTP with API keys: each call's tenant is its key's
    _knowledge: Knowledge | None = None
    _embedding: EmbeddingModel | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _worker: asyncio.Task[None] | None = None

    async def knowledge(self) -> Knowledge:
        """Built on first use: loading the embedding model takes a while."""
        async with self._lock:
            if self._knowledge is None:
                self._embedding = embedding_model_from_settings(self.settings)
                self._knowledge = Knowledge.build(self.runtime.db, self._embedding,
                                                  self.settings)
            return self._knowledge

    async def tenant(self, headers: Mapping[str, str] | None) -> str:
        """``default`` on stdio and on loopback HTTP without keys; else the key's tenant."""
        if not self.auth:
            return CLI_TENANT
        scheme, _, key = (headers or {}).get("authorization", "").partition(" ")
        principal = await api_keys.authenticate(self.runtime.db, key.strip()) \
            if scheme.lower() == "bearer" else None
        if principal is None:
            raise Unauthorized("this call needs a valid API key: send `Authorization: Bearer "
                               "<key>` (`onebox keys create` makes one)", field="authorization")
        return principal.tenant_id

    def start_worker(self) -> None:
        """Run submitted runs in this process, as `onebox up` does."""
        runner = Worker(self.runtime.db, self.runtime.backend, self.settings,
                        objects=self.runtime.objects)
        log.info("worker %s started in the MCP server", runner.owner)
        self._worker = asyncio.create_task(runner.serve(self._stop, drain_s=WORKER_DRAIN_S))

    async def close(self) -> None:
        self._stop.set()
        if self._worker is not None:
            try:
                await self._worker
            except Exception:
                log.exception("the MCP server's worker failed while stopping")
        if self._embedding is not None:
            await self._embedding.close()
        await self.runtime.close()


async def open_state(settings: Settings, *, worker: bool, auth: bool) -> McpState:
    state = McpState(settings, await Runtime.open(settings), auth=auth)
    if worker:
        state.start_worker()
    return state
