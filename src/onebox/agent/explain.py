"""Render the decisions of a run as text, from stored actions (``Action.to_dict()``).

    for line in explain_lines(payloads):   # payloads of the run's events, in order
        print(line)

    plan  plan v1: written by the model for the request
    load  run     no dependencies
    big   skip    condition 'count.result.n > 10' is false
    fetch retry   attempt 2 of 3 with the fixed code
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def decision_rows(actions: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per decision: action id and type, step, kind, reason (plan changes included)."""
    rows: list[dict[str, Any]] = []
    for action in actions:
        decision = action.get("decision")
        if not isinstance(decision, Mapping):
            continue
        step = action.get("instance") or decision.get("step_id") or action.get("step_id")
        rows.append({"action_id": action.get("id"), "type": action.get("type"),
                     "step": step, "kind": decision.get("kind"),
                     "reason": decision.get("reason")})
        for change in action.get("changes") or ():
            rows.append({"action_id": action.get("id"), "type": action.get("type"),
                         "step": change.get("step_id"), "kind": change.get("kind"),
                         "reason": change.get("reason")})
    return rows


def explain_lines(actions: Iterable[Mapping[str, Any]]) -> list[str]:
    """Aligned text lines: step (or '-' for run-level), decision kind, reason."""
    rows = decision_rows(actions)
    width = max((len(str(r["step"] or "-")) for r in rows), default=1)
    return [f"{str(r['step'] or '-'):<{width}}  {r['kind']:<7} {r['reason']}" for r in rows]
