"""Stored plan versions as a worker reads them: parsed and indexed once per process.

Below :mod:`onebox.runtime.engine.submit` (which stores them) and :mod:`onebox.runtime.engine.archive`
(which advances a run along them); plans never change once stored.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from typing import Any

from onebox.agent.plan import Plan, parse_plan
from onebox.runtime.engine.schedule import PlanIndex
from onebox.store import runs as store

PLAN_CACHE_MAX = 64  # plan versions a worker keeps parsed (least recently used go first)
_plans: OrderedDict[uuid.UUID, PlanIndex] = OrderedDict()


async def load_plan_version(conn: store.Conn, plan_id: uuid.UUID) -> Plan:
    return (await load_plan_index(conn, plan_id)).plan


async def load_plan_index(conn: store.Conn, plan_id: uuid.UUID) -> PlanIndex:
    """Plans never change once stored, so each worker parses and indexes a version once."""
    index = _plans.get(plan_id)
    if index is not None:
        _plans.move_to_end(plan_id)
        return index
    row = await store.fetch_one(conn, "plan_by_id", {"plan_id": plan_id})
    assert row is not None, f"plan {plan_id} vanished"
    index = _plans[plan_id] = await asyncio.to_thread(_index_plan, row["spec"])
    while len(_plans) > PLAN_CACHE_MAX:
        _plans.popitem(last=False)
    return index


def _index_plan(spec: dict[str, Any]) -> PlanIndex:
    """Validate and order a stored plan (off the event loop: a plan may have 50,000 steps)."""
    return PlanIndex.of(parse_plan(spec))
