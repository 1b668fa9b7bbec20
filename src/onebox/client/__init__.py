"""onebox's Python SDK: ``Client`` and ``AsyncClient`` over the HTTP API (httpx only; nothing
server-side is imported). See docs/sdk.md."""

from __future__ import annotations

from onebox.client.aio import AsyncClient, AsyncSession
from onebox.client.errors import ApiError, ServerUnreachable, Unauthorized
from onebox.client.sync import Client, Session
from onebox.client.types import (
    CellError,
    CellOutput,
    Event,
    ExecResult,
    Memory,
    Run,
    RunFile,
    SearchHit,
    SessionInfo,
    Snapshot,
    Submitted,
)

__all__ = ["ApiError", "AsyncClient", "AsyncSession", "CellError", "CellOutput", "Client",
           "Event", "ExecResult", "Memory", "Run", "RunFile", "SearchHit", "ServerUnreachable",
           "Session", "SessionInfo", "Snapshot", "Submitted", "Unauthorized"]
