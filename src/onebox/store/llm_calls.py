"""The model transcript in SQL: one ``llm_calls`` row per model call, and a run's totals.

This module only stores and reads rows; calling the model and turning its request
and response into a row is :mod:`onebox.model_calls`. Cost is computed
there from the configured price table (``ONEBOX_LLM__PRICES``); a model missing
from it is recorded with ``cost_usd`` NULL, not zero.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from onebox.store.db import Conn
from onebox.store.queries import load_queries

Q = load_queries("llm_calls")


@dataclass(frozen=True)
class LlmCallRow:
    """One model call as stored: JSON-ready messages, request options and response."""

    run_id: uuid.UUID | None
    model: str
    messages: list[dict[str, Any]]
    request: dict[str, Any]
    response: dict[str, Any] | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float | None = None
    cost_usd: float | None = None
    error: str | None = None
    step_id: str | None = None
    action_id: str | None = None
    purpose: str | None = None


async def insert_llm_call(conn: Conn, row: LlmCallRow) -> int:
    """Insert one llm_calls row; returns its id. A row has a response, or an error."""
    if row.response is None and row.error is None:
        raise ValueError("an llm_calls row needs a response or an error")
    cur = await conn.execute(Q["insert_llm_call"], {
        "run_id": row.run_id, "step_id": row.step_id, "action_id": row.action_id,
        "purpose": row.purpose, "model": row.model, "messages": Jsonb(row.messages),
        "request": Jsonb(row.request),
        "response": Jsonb(row.response) if row.response is not None else None,
        "prompt_tokens": row.prompt_tokens, "completion_tokens": row.completion_tokens,
        "latency_ms": row.latency_ms, "cost_usd": row.cost_usd, "error": row.error,
    })
    found = await cur.fetchone()
    assert found is not None
    return int(found["id"])


async def llm_calls(conn: Conn, run_id: uuid.UUID) -> list[dict[str, Any]]:
    cur = await conn.execute(Q["llm_calls_of_run"], {"run_id": run_id})
    return list(await cur.fetchall())


async def llm_usage(conn: Conn, run_id: uuid.UUID) -> dict[str, Any]:
    """Totals for a run: calls, prompt/completion tokens, cost_usd, unpriced_calls, latency_ms."""
    cur = await conn.execute(Q["llm_usage_of_run"], {"run_id": run_id})
    row: dict[str, Any] | None = await cur.fetchone()
    assert row is not None
    return row
