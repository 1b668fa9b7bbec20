"""Runs as every front door shows them (HTTP, MCP): tenant checks, filters, and one run with its plan, steps and warnings.

Everything here reads; state changes go through :mod:`onebox.runtime.services.runs`.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from onebox.agent.plan import parse_plan
from onebox.config import Settings
from onebox.errors import NotFound
from onebox.runtime.agent.runs import require_model, submit_task
from onebox.runtime.engine.run_files import RunFile
from onebox.runtime.engine.submit import Submitted, run_session_id
from onebox.runtime.services import console_views, run_views
from onebox.runtime.services import runs as runtime_runs
from onebox.runtime.services.explain import overwrites_text
from onebox.runtime.services.submission import submit_plan
from onebox.store.db import Database

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "DEAD")


async def require_run(db: Database, run_id: uuid.UUID, tenant_id: str) -> None:
    """NotFound unless the run exists *and* belongs to the tenant (no hint that it exists)."""
    if await run_views.run_tenant(db, run_id) != tenant_id:
        raise NotFound(f"run {run_id} does not exist", field="run_id")


async def workspace_session(db: Database, run_id: uuid.UUID, tenant_id: str) -> str:
    """The session of the run's workspace; NotFound unless the tenant owns the run."""
    session_id = await run_views.run_session(db, run_id, tenant_id)
    if session_id is None:
        raise NotFound(f"run {run_id} does not exist", field="run_id")
    return session_id


async def create_run(
    db: Database, settings: Settings, tenant_id: str, *, plan: dict[str, Any] | None,
    task: str | None, name: str | None, idempotency_key: str | None,
    profile: str | None = None, inputs: Sequence[RunFile] = (),
) -> Submitted:
    """Submit for the tenant; its idempotency keys are the ones its CLI uses too (one
    namespace per tenant; two tenants may use the same key)."""
    if plan is None:
        if profile is None:  # a profile names its own model
            check_llm(settings)
        run_id, existing = await submit_task(
            db, str(task), name=name, idempotency_key=idempotency_key, tenant_id=tenant_id,
            settings=settings, profile=profile, inputs=inputs)
        run = await runtime_runs.get_run(db, run_id)
        return Submitted(run_id, str(run["trace_id"]).strip(), existing)
    parsed = await asyncio.to_thread(parse_plan, plan)  # a big plan never stalls the API
    return await submit_plan(db, settings, parsed, name=name,
                             idempotency_key=idempotency_key, tenant_id=tenant_id,
                             inputs=inputs)


def check_llm(settings: Settings) -> None:
    """A task needs a chat model: say exactly which settings are missing."""
    require_model(settings, field="task", why="a run from a task (the agent planning it)",
                  profiles=True)


async def search_runs(
    db: Database, tenant_id: str, *, statuses: list[str] | None, since: datetime | None,
    until: datetime | None, text: str | None, before: datetime | None, limit: int,
) -> list[dict[str, Any]]:
    runs = await run_views.search_runs(db, tenant_id, statuses=statuses, since=since,
                                       until=until, text=text, before=before, limit=limit)
    usage = await console_views.runs_usage(db, [r["id"] for r in runs])
    none = {"tokens": 0, "cost_usd": None, "model_calls": 0}
    return [dict(r, duration_ms=_duration_ms(r), **usage.get(r["id"], none)) for r in runs]


def _duration_ms(run: dict[str, Any]) -> float | None:
    """Start to finish (to now while it runs); None before it starts."""
    if run.get("started_at") is None:
        return None
    end = run.get("finished_at") or datetime.now(run["started_at"].tzinfo)
    return (end - run["started_at"]).total_seconds() * 1000


async def run_detail(
    db: Database, run_id: uuid.UUID, *, limit: int = runtime_runs.PAGE_STEPS,
    after: str | None = None,
) -> dict[str, Any]:
    """The run, its summary, its plan versions and one page of step attempts (with warnings
    and decisions); ``next`` is the cursor of the following page."""
    run = await runtime_runs.get_run(db, run_id)
    plans = await run_views.plan_versions(db, run_id)
    page = await steps_view_page(db, run_id, limit=limit, after=after)
    calls = await run_views.run_model_calls(db, run_id)
    waiting = await run_views.waiting_approvals(db, run_id)
    return {
        "run": public_run(run),
        "summary": await runtime_runs.run_summary(db, run_id),
        "plans": [dict(p, steps=_plan_steps(p["spec"])) for p in plans],
        **page,
        "warnings": run_warnings(run, await run_views.last_event(db, run_id)),
        "waiting_approvals": waiting,
        "model_calls": [_call(c) for c in calls if c["step_id"] is None],
        "session_id": run_session_id(run),
    }


async def steps_view_page(
    db: Database, run_id: uuid.UUID, *, limit: int, after: str | None,
) -> dict[str, Any]:
    """One page of step attempts as the API shows them, and the next page's cursor."""
    page = await runtime_runs.steps_page(db, run_id, limit=limit, after=after)
    ids = [s["id"] for s in page["steps"]]
    notes = await run_views.step_warning_events(db, run_id, ids)
    calls = await run_views.run_model_calls(db, run_id)
    by_execution: dict[Any, list[dict[str, Any]]] = {}
    for note in notes:
        by_execution.setdefault(note["execution_id"], []).append(note)
    by_step: dict[Any, list[dict[str, Any]]] = {}
    for call in calls:
        by_step.setdefault(call["step_id"], []).append(call)
    views = [step_view(s, by_execution.get(s["id"], []), by_step.get(s["step_id"], []))
             for s in page["steps"]]
    return {"steps": views, "next": page["next"]}


def public_run(run: dict[str, Any]) -> dict[str, Any]:
    hidden = {"lease_owner", "lease_expires_at", "fencing_token"}
    return {k: v for k, v in run.items() if k not in hidden}


def _plan_steps(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": s.get("id"), "depends_on": s.get("depends_on", []),
             "kind": s.get("kind", "code"), "tool": s.get("tool"),
             "description": s.get("description")} for s in spec.get("steps", [])]


def _exact_output(row: dict[str, Any]) -> dict[str, str | None]:
    """The exact bytes printed, base64, where the text view is not them (a NUL, invalid
    UTF-8, or output longer than the text keeps); None where ``stdout``/``stderr`` are exact."""
    out: dict[str, str | None] = {}
    for stream in ("stdout", "stderr"):
        raw = row.get(f"{stream}_bytes")
        out[f"{stream}_base64"] = base64.b64encode(bytes(raw)).decode() if raw is not None \
            else None
    return out


def step_view(
    row: dict[str, Any], notes: list[dict[str, Any]], calls: list[dict[str, Any]]
) -> dict[str, Any]:
    details = row.get("details") or {}
    waiting = row["status"] == "PENDING" and row.get("waiting_for") == "approval"
    return {
        "execution_id": row["id"], "step_id": row["step_id"], "step_number": row["step_number"],
        "attempt": row["attempt"], "max_attempts": row.get("max_attempts"),
        "status": row["status"], "tool": row["tool_name"], "code": details.get("code"),
        "language": details.get("language"), "stdout": row.get("stdout"),
        "stderr": row.get("stderr"), **_exact_output(row),
        "error": row.get("error"), "exit_code": row.get("exit_code"),
        "resources": {"duration_ms": row.get("duration_ms"),
                      "memory_used_mb": row.get("memory_used_mb"),
                      "cpu_usage_percent": row.get("cpu_usage_percent"),
                      "limits": details.get("limits"),
                      "allow_domains": details.get("allow_domains", [])},
        "files": details.get("files_written", []),
        "snapshot_id": row.get("snapshot_id"), "pre_snapshot_id": row.get("pre_snapshot_id"),
        "created_at": row.get("created_at"), "started_at": row.get("started_at"),
        "finished_at": row.get("finished_at"), "input_hash": row.get("input_hash"),
        "output_hash": row.get("output_hash"),
        "decision": _decision(details, calls),
        "warnings": step_warnings(row, details, notes),
        "waiting_approval": waiting,
    }


def _decision(details: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    approval = {k: details[k] for k in ("approved", "by", "comment") if k in details}
    if not approval and not calls:
        return None
    return {"approval": approval or None, "model_calls": [_call(c) for c in calls]}


def _call(row: dict[str, Any]) -> dict[str, Any]:
    """One model call as a decision record: why it was made and what the model answered."""
    keep = ("purpose", "action_id", "model", "response", "error", "prompt_tokens",
            "completion_tokens", "latency_ms", "created_at")
    return {k: row.get(k) for k in keep}


def attempt_label(row: dict[str, Any]) -> str:
    """The attempt as "2 of 3", or just "2" when the row's limit is below it (a held agent
    action is queued with a limit of 1; a retry raises the limit only by what it adds)."""
    limit = row.get("max_attempts")
    return f"{row['attempt']} of {limit}" if limit and limit >= row["attempt"] else \
        str(row["attempt"])


def step_warnings(
    row: dict[str, Any], details: dict[str, Any], notes: list[dict[str, Any]]
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    if details.get("session_reset"):
        out.append({"kind": "session_reset", "message": "the sandbox session was reset before "
                    "this step: files written by earlier steps were gone"})
    if row["attempt"] > 1:
        out.append({"kind": "retry", "message": f"attempt {attempt_label(row)}: "
                    "earlier attempts failed"})
    if details.get("truncated"):
        out.append({"kind": "truncated", "message": "output was cut at the size limit"})
    for note in notes:
        payload = note["payload"] or {}
        if note["type"] == "BLOCKED_EXTERNAL_ACCESS":
            where = f"{payload.get('host')}:{payload.get('port')}" if payload.get("port") \
                else str(payload.get("host"))
            out.append({"kind": "blocked_network", "message": f"blocked network access to "
                        f"{where} ({payload.get('reason', 'not allowed')})"})
        elif note["type"] == "workspace_restored":
            why = ("was not this step's view" if payload.get("reason") == "stale"
                   else "was not on this host")
            out.append({"kind": "workspace_restored", "message": f"the workspace copy {why}: "
                        f"brought to it ({payload.get('files')} files)"})
        elif note["type"] == "workspace_merged" and payload.get("overwrites"):
            out.append({"kind": "overwrite", "message": overwrites_text(payload)})
        elif note["type"] == "step_lease_expired":
            out.append({"kind": "stale", "message": "the worker running this attempt was lost; "
                        "its lease expired and the step was retried"})
    return out


def run_warnings(run: dict[str, Any], last: dict[str, Any] | None) -> list[dict[str, str]]:
    """A run is stale while its last event is the watchdog's `run_stale`."""
    if last is None or last["type"] != "run_stale" or run["status"] in TERMINAL:
        return []
    since = (last["payload"] or {}).get("silent_since") or last["created_at"]
    return [{"kind": "stale", "message": f"no progress since {since}: no worker has reported "
             "on this run; check that a worker is running (`onebox worker`)"}]
