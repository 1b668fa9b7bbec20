"""What the console reads beyond the run views: usage per run and a run's model calls."""

from __future__ import annotations

import uuid
from typing import Any

from onebox.errors import NotFound
from onebox.store.db import Database
from onebox.store.queries import load_queries

Q = load_queries("console")


async def runs_usage(db: Database, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """Tokens, cost (None when no call had a price) and model calls per run, by run id."""
    if not run_ids:
        return {}
    rows = await db.fetch(Q["runs_usage"], {"run_ids": run_ids})
    return {r["run_id"]: {"tokens": int(r["tokens"] or 0), "cost_usd": r["cost_usd"],
                          "model_calls": int(r["model_calls"])} for r in rows}


async def model_calls(db: Database, run_id: uuid.UUID) -> list[dict[str, Any]]:
    """The run's model calls in order, with tokens, cost and latency (no prompt or reply)."""
    return [dict(r) for r in await db.fetch(Q["run_model_calls"], {"run_id": run_id})]


async def model_call(db: Database, run_id: uuid.UUID, call_id: int) -> dict[str, Any]:
    """One model call of the run with its prompt (messages) and reply."""
    row = await db.fetchone(Q["run_model_call"], {"run_id": run_id, "call_id": call_id})
    if row is None:
        raise NotFound(f"run {run_id} has no model call {call_id}; "
                       f"GET /v1/runs/{run_id}/model-calls lists them", field="call_id")
    return dict(row)
