"""Rebuild a run's state from its events alone.

The event log is the source of truth: every change to `runs`, `plans` and
`task_execution` is written with an event in the same transaction, so folding a
run's events in order gives back its status, its plan versions and every step
attempt. `rebuild` does that fold; a test checks it equals the tables.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from onebox.runtime.engine.event_log import run_events
from onebox.store.db import Database

TERMINAL_EVENTS = {"run_succeeded": "SUCCEEDED", "run_dead": "DEAD", "run_cancelled": "CANCELLED",
                   "run_failed": "FAILED"}
ATTEMPT_FIELDS = ("step_id", "attempt", "status", "exit_code", "output_hash", "duration_ms",
                  "memory_used_mb", "cpu_usage_percent", "error")


@dataclass
class RebuiltRun:
    run_id: uuid.UUID
    status: str = "PENDING"
    error: str | None = None
    current_plan_id: str | None = None
    plan_versions: dict[int, str] = field(default_factory=dict)
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    open_approvals: set[str] = field(default_factory=set)
    source: str = "plan"


def fold(run_id: uuid.UUID, events: list[dict[str, Any]]) -> RebuiltRun:
    """Apply events in sequence order; pure."""
    state = RebuiltRun(run_id)
    for event in sorted(events, key=lambda e: e["seq"]):
        _apply(state, event["type"], event["payload"])
    return state


def _apply(state: RebuiltRun, kind: str, p: dict[str, Any]) -> None:
    if kind == "run_submitted":
        state.source = p.get("source", "plan")
    elif kind == "plan_created":
        state.plan_versions[p["version"]] = p["plan_id"]
        state.current_plan_id = p["plan_id"]
    elif kind == "step_queued":
        state.attempts[p["execution_id"]] = {
            "step_id": p["step_id"], "attempt": p["attempt"], "status": "PENDING",
            "step_number": p["step_number"], "input_hash": p["input_hash"],
            "exit_code": None, "output_hash": None, "duration_ms": None,
            "memory_used_mb": None, "cpu_usage_percent": None, "error": None}
    elif kind == "step_started":
        attempt = state.attempts.setdefault(p["execution_id"], {  # agent steps start unqueued
            "step_id": p["step_id"], "attempt": p["attempt"], "step_number": p.get("step_number"),
            "input_hash": p.get("input_hash"), "exit_code": None, "output_hash": None,
            "duration_ms": None, "memory_used_mb": None, "cpu_usage_percent": None, "error": None})
        attempt["status"] = "RUNNING"
    elif kind in ("step_succeeded", "step_failed", "step_timed_out", "step_lease_expired"):
        attempt = state.attempts[p["execution_id"]]
        attempt.update({k: p.get(k) for k in ATTEMPT_FIELDS if k in p})
    elif kind == "run_started" and state.status == "PENDING":
        state.status = "RUNNING"
    elif kind == "approval_requested":
        state.open_approvals.add(p["step_id"])
        if state.status in ("PENDING", "RUNNING"):
            state.status = "WAITING"
    elif kind in ("approval_granted", "approval_rejected"):
        state.open_approvals.discard(p["step_id"])
        if not state.open_approvals and state.status == "WAITING":
            # a plan run continues at once; a task run waits for a worker to resume its agent
            state.status = "PENDING" if state.source == "task" else "RUNNING"
    elif kind == "run_retried":
        state.status, state.error = "PENDING", None
    elif kind in TERMINAL_EVENTS and state.status not in TERMINAL_EVENTS.values():
        state.status, state.error = TERMINAL_EVENTS[kind], p.get("error")


async def rebuild(db: Database, run_id: uuid.UUID) -> RebuiltRun:
    """The run's state computed from `agent_events` only."""
    return fold(run_id, await run_events(db, run_id))
