"""Why each step ran, was skipped, retried or replaced: decision records from the event log.

Agent runs store every action with its decision (``agent_action`` events); plan runs get
theirs from the queue's events (queued because its dependencies succeeded, retried after a
failure, re-run after a lost worker, waiting for a person).
"""

from __future__ import annotations

import uuid
from typing import Any

from onebox.agent.explain import decision_rows
from onebox.runtime.services.runs import get_run, run_events
from onebox.runtime.threads.service import context_rows
from onebox.store.db import Database


async def explain(db: Database, run_id: uuid.UUID) -> list[dict[str, Any]]:
    """One row per decision, in order: {seq, step, kind, reason}."""
    run = await get_run(db, run_id)
    events = await run_events(db, run_id)
    if run["source"] == "task":
        actions = [(e["seq"], e["payload"]) for e in events if e["type"] == "agent_action"]
        rows = []
        for seq, action in actions:
            rows += [{"seq": seq, "step": r["step"], "kind": r["kind"], "reason": r["reason"]}
                     for r in decision_rows([action])]
        return await context_rows(db, events) + rows + _outcome(events)
    return [row for e in events if (row := _plan_decision(e)) is not None] + _outcome(events)


def _plan_decision(event: dict[str, Any]) -> dict[str, Any] | None:
    p, kind = event["payload"], event["type"]
    row = {"seq": event["seq"], "step": p.get("step_id")}
    if kind == "plan_created":
        return row | {"kind": "plan", "reason": f"plan v{p['version']}: {p.get('reason')}"}
    if kind == "step_queued" and p.get("attempt", 1) == 1:
        return row | {"kind": "run", "reason": "its dependencies succeeded"
                      if p.get("input_hash") and p.get("step_number", 1) > 1 else "ready"}
    if kind == "step_queued":
        return row | {"kind": "retry", "reason": f"attempt {p['attempt']} of "
                      f"{p.get('max_attempts')} after {p.get('delay_s', 0)} s"}
    if kind in ("step_failed", "step_timed_out"):
        return row | {"kind": "fail", "reason": p.get("error") or kind}
    if kind == "step_lease_expired":
        return row | {"kind": "lost", "reason": p.get("error") or "lease expired"}
    if kind == "approval_requested":
        return row | {"kind": "wait", "reason": f"approval: {p.get('prompt')}"}
    if kind in ("approval_granted", "approval_rejected"):
        verb = "approved" if kind == "approval_granted" else "rejected"
        return row | {"kind": verb[:-1], "reason": f"{verb} by {p.get('by')}"
                      + (f": {p['comment']}" if p.get("comment") else "")}
    if kind == "run_forked":
        kept = p.get("inherited") or []
        return row | {"step": p.get("at"), "kind": "fork", "reason": f"forked from run "
                      f"{p.get('from_run_id')} at step {p.get('at')}: kept "
                      f"{', '.join(map(str, kept)) or 'no step'}; the workspace is the one "
                      f"before {p.get('at')} (snapshot {p.get('from_snapshot')})"
                      + (f"; model calls from {p.get('at')} on go to profile "
                         f"{p['profile']}" if p.get("profile") else "")}
    if kind == "run_replay":
        return row | {"kind": "replay", "reason": f"replay of run {p.get('of_run_id')}: "
                      f"{p.get('matches')} of {p.get('replayed')} re-executed code steps "
                      "match" + (f"; the first that differs is {p['first_difference']}"
                                 if p.get("first_difference") else "")}
    if kind == "run_replayed":
        return row | {"kind": "replay", "reason": f"replayed as run {p.get('replay_run_id')}:"
                      f" {p.get('matches')} of {p.get('replayed')} code steps match"}
    if kind == "step_replayed":
        return row | {"kind": "replay", "reason": f"re-executed from the before-step "
                      f"snapshot of attempt {p.get('from_execution_id')}: "
                      + ("same output" if p.get("match") else "the output differs")}
    if kind == "step_inherited":
        return row | {"kind": "inherit", "reason": f"result kept from run "
                      f"{p.get('from_run_id')} (attempt {p.get('from_execution_id')}); not "
                      "run again"}
    if kind == "step_started":
        return row | {"kind": "start", "reason": f"attempt {p.get('attempt', 1)} on worker "
                      f"{p.get('worker')}"}
    if kind == "workspace_restored":
        why = {"stale": "the copy on this host was not this step's view (steps ran on "
                        "another host, or another step or a lost attempt wrote it)",
               "missing": "this host had no copy"}.get(str(p.get("reason")), "")
        return row | {"kind": "restore", "reason": f"workspace brought to this step's view "
                      f"({p.get('files')} files)" + (f": {why}" if why else "")}
    if kind == "workspace_merged":
        return row | {"kind": "merge", "reason": overwrites_text(p)}
    return None


def overwrites_text(payload: dict[str, Any]) -> str:
    """The overwrites of a ``workspace_merged`` event, said once for every door."""
    pairs = payload.get("overwrites") or []
    said = "; ".join(f"{o.get('path')}: {o.get('kept')}'s version kept over {o.get('lost')}'s"
                     for o in pairs[:5] if isinstance(o, dict))
    more = int(payload.get("count") or len(pairs)) - min(len(pairs), 5)
    return ("two steps that do not depend on each other changed the same path, the one later "
            f"in the plan wins: {said}" + (f" (and {more} more)" if more > 0 else ""))


def _outcome(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"seq": e["seq"], "step": None, "kind": e["type"].removeprefix("run_"),
             "reason": e["payload"].get("error") or "every step succeeded"}
            for e in events if e["type"] in ("run_succeeded", "run_failed", "run_dead",
                                            "run_cancelled")]
