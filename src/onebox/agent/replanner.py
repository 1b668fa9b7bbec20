"""Plan version N+1: keep what finished, take the rest from the model, say what changed.

Steps that already succeeded or were skipped are copied verbatim from the old
plan (whatever the model wrote for them), so they are never run again; the
model may add, change, remove and rewire everything else.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from onebox.agent.actions import Decision
from onebox.agent.plan import Plan, Step, parse_plan
from onebox.errors import PlanError


def step_data(step: Step) -> dict[str, Any]:
    return step.model_dump(mode="json", exclude_defaults=True)


def merge_replan(old: Plan, new_data: Any, finished: Collection[str],
                 version: int) -> tuple[Plan, tuple[Decision, ...]]:
    """Validate the model's new plan with the finished steps of ``old`` kept; PlanError if bad."""
    if not isinstance(new_data, Mapping) or not isinstance(new_data.get("steps"), list):
        raise PlanError("a plan must be a mapping with a 'steps' list")
    order = [s.id for s in old.steps]
    kept = [step_data(old.step(sid)) for sid in order if sid in finished]
    proposed = new_data["steps"]
    rest = [s for s in proposed if not (isinstance(s, Mapping) and s.get("id") in finished)]
    plan = parse_plan({**new_data, "steps": kept + rest})
    overridden = [
        s["id"] for s in proposed
        if isinstance(s, Mapping) and s.get("id") in finished
        and _normalised(s) != step_data(old.step(s["id"]))
    ]
    return plan, _changes(old, plan, finished, overridden, version)


def _normalised(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        return step_data(Step.model_validate(raw))
    except ValueError:
        return None


def _changes(old: Plan, new: Plan, finished: Collection[str], overridden: list[str],
             version: int) -> tuple[Decision, ...]:
    old_ids = {s.id for s in old.steps}
    new_ids = {s.id for s in new.steps}
    changes: list[Decision] = []
    for s in old.steps:
        if s.id not in new_ids:
            changes.append(Decision("replace", f"removed in plan v{version}", s.id))
        elif s.id not in finished and step_data(s) != step_data(new.step(s.id)):
            changes.append(Decision("change", f"redefined in plan v{version}", s.id))
    for s in new.steps:
        if s.id not in old_ids:
            after = ", ".join(s.depends_on) or "the start"
            changes.append(Decision("insert", f"added in plan v{version} after {after}", s.id))
    for sid in overridden:
        changes.append(Decision("keep", "already finished; kept unchanged although the new "
                                "plan redefined it", sid))
    return tuple(changes)

