"""Plan version N+1: finished steps are kept verbatim, the rest comes from the model."""

from __future__ import annotations

import pytest

from onebox.agent.plan import parse_plan
from onebox.agent.replanner import merge_replan
from onebox.errors import PlanError

OLD = parse_plan({"steps": [
    {"id": "a", "tool": "python", "code": "print('a')"},
    {"id": "b", "tool": "python", "code": "print('b')", "depends_on": ["a"]},
    {"id": "c", "tool": "python", "code": "print('c')", "depends_on": ["b"]},
]})


def test_finished_steps_are_restored_when_the_model_drops_them() -> None:
    new, changes = merge_replan(OLD, {"steps": [
        {"id": "b2", "tool": "bash", "code": "echo b2", "depends_on": ["a"]},
        {"id": "c", "tool": "python", "code": "print('c')", "depends_on": ["b2"]},
    ]}, finished={"a"}, version=2)
    assert [s.id for s in new.steps] == ["a", "b2", "c"]
    assert new.step("a") == OLD.step("a")
    kinds = {(d.kind, d.step_id) for d in changes}
    assert kinds == {("replace", "b"), ("insert", "b2"), ("change", "c")}


def test_a_new_step_depending_on_a_removed_one_is_refused() -> None:
    with pytest.raises(PlanError) as info:
        merge_replan(OLD, {"steps": [
            {"id": "c", "tool": "python", "code": "1", "depends_on": ["b"]},
        ]}, finished={"a"}, version=2)
    assert info.value.step == "c" and "'b'" in info.value.message


def test_not_a_plan_is_refused() -> None:
    with pytest.raises(PlanError, match="'steps' list"):
        merge_replan(OLD, ["not", "a", "plan"], finished=set(), version=2)
