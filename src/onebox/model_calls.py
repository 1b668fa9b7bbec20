"""Every model call, performed and recorded: run, step, model, messages, response,
tokens, latency, cost.

    reply = await call_model(db, model, action, run_id=run_id, prices=price_table(s.llm))

or, when the caller already has the response and a transaction open::

    await record_llm_call(conn, run_id=..., step_id=..., request=..., response=..., ...)

The row itself is stored by :mod:`onebox.store.llm_calls` (SQL only). Cost comes
from the configured price table (``ONEBOX_LLM__PRICES``); a model missing from it
is recorded with ``cost_usd`` NULL, not zero.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from onebox.agent.actions import CallModel, ModelReply
from onebox.errors import OneboxError
from onebox.llm.base import ChatModel, ChatRequest, ChatResponse, ModelPrice, cost_usd
from onebox.store.db import Database
from onebox.store.llm_calls import Conn, LlmCallRow, insert_llm_call


async def record_llm_call(
    conn: Conn,
    *,
    run_id: uuid.UUID | None,
    model: str,
    request: ChatRequest,
    response: ChatResponse | None,
    prices: Mapping[str, ModelPrice] | None = None,
    step_id: str | None = None,
    action_id: str | None = None,
    purpose: str | None = None,
    latency_ms: float | None = None,
    error: str | None = None,
) -> int:
    """Insert one llm_calls row; returns its id. Give a response, or an error for a failed call."""
    if response is None and error is None:
        raise ValueError("record_llm_call needs a response or an error")
    usage = response.usage if response is not None else None
    if latency_ms is None and response is not None:
        latency_ms = response.latency_ms
    return await insert_llm_call(conn, LlmCallRow(
        run_id=run_id, model=model, step_id=step_id, action_id=action_id, purpose=purpose,
        messages=[m.to_dict() for m in request.messages],
        request={k: v for k, v in request.to_dict().items() if k != "messages"},
        response=response.to_dict() if response is not None else None,
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        latency_ms=latency_ms, error=error,
        cost_usd=cost_usd(model, usage, prices or {}) if usage is not None else None,
    ))


async def call_model(
    db: Database,
    model: ChatModel,
    action: CallModel,
    *,
    run_id: uuid.UUID | None,
    prices: Mapping[str, ModelPrice] | None = None,
) -> ModelReply:
    """Perform a CallModel action and record it (also when it fails, then re-raise)."""
    started = time.perf_counter()
    common: dict[str, Any] = {
        "run_id": run_id, "model": model.name, "request": action.request, "prices": prices,
        "step_id": action.step_id, "action_id": action.id, "purpose": action.purpose,
    }
    try:
        response = await model.complete(action.request)
    except OneboxError as exc:
        elapsed = (time.perf_counter() - started) * 1000
        async with db.transaction() as conn:
            await record_llm_call(conn, response=None, latency_ms=elapsed,
                                  error=f"{exc.code}: {exc.message}", **common)
        raise
    async with db.transaction() as conn:
        await record_llm_call(conn, response=response, **common)
    return ModelReply(action.id, response)
