"""Plan validation: a bad plan is refused before anything runs, naming the step and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from onebox.agent.plan import load_plan, parse_plan, topological_order
from onebox.errors import PlanError


def plan(*steps: dict) -> dict:
    return {"steps": list(steps)}


def step(id: str, deps: tuple[str, ...] = (), **extra: object) -> dict:
    return {"id": id, "tool": "python", "code": "print(1)", "depends_on": list(deps), **extra}


def refused(data: object) -> PlanError:
    with pytest.raises(PlanError) as info:
        parse_plan(data)
    return info.value


def test_valid_plan_orders_dependencies_first() -> None:
    p = parse_plan(plan(step("d", ("b", "c")), step("b", ("a",)), step("c", ("a",)), step("a")))
    order = topological_order(p)
    assert order.index("a") < order.index("b") < order.index("d")
    assert order.index("c") < order.index("d")
    assert p.step_numbers()["a"] == 1


def test_unknown_field_names_step_and_field() -> None:
    err = refused(plan(step("a"), step("b", comand="x")))
    assert err.step == "b"
    assert err.field == "steps[b].comand"
    assert "unknown field" in err.message


def test_unknown_top_level_field() -> None:
    err = refused({"steps": [step("a")], "stesp": []})
    assert err.field == "stesp"


def test_cycle_is_refused_naming_the_steps() -> None:
    err = refused(plan(step("a", ("c",)), step("b", ("a",)), step("c", ("b",)), step("d")))
    assert "cycle" in err.message
    assert "a -> b -> c" in err.message
    assert err.field == "steps[a].depends_on"


def test_self_dependency_is_refused() -> None:
    err = refused(plan(step("a", ("a",))))
    assert err.step == "a" and "itself" in err.message


def test_missing_dependency_names_it() -> None:
    err = refused(plan(step("a"), step("b", ("nope",))))
    assert err.step == "b"
    assert "'nope'" in err.message
    assert err.field == "steps[b].depends_on"


def test_duplicate_id_is_refused() -> None:
    err = refused(plan(step("a"), step("a")))
    assert err.step == "a" and "duplicate" in err.message


def test_wrong_tool_and_missing_code() -> None:
    err = refused(plan({"id": "a", "tool": "ruby", "code": "x"}))
    assert err.field == "steps[a].tool"
    err = refused(plan({"id": "a", "tool": "bash"}))
    assert err.field == "steps[a].code" and "required" in err.message


def test_empty_and_non_mapping_plans() -> None:
    assert refused({"steps": []}).field == "steps"
    assert "mapping" in refused(["a"]).message


def test_bad_step_id_names_position() -> None:
    err = refused(plan(step("ok"), {"id": "bad id!", "tool": "bash", "code": "true"}))
    assert err.field == "steps[bad id!].id"


def test_load_yaml_and_json(tmp_path: Path) -> None:
    y = tmp_path / "p.yaml"
    y.write_text("steps:\n  - id: a\n    tool: bash\n    code: echo hi\n")
    assert load_plan(y).steps[0].tool == "bash"
    j = tmp_path / "p.json"
    j.write_text('{"steps": [{"id": "a", "tool": "python", "code": "print(1)"}]}')
    assert load_plan(j).steps[0].id == "a"
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [\n")
    with pytest.raises(PlanError, match="not valid YAML"):
        load_plan(bad)
    with pytest.raises(PlanError, match="cannot read"):
        load_plan(tmp_path / "missing.yaml")


def test_knowledge_paths_must_stay_in_the_workspace() -> None:
    for bad in ("/etc/passwd", "../x", "a/../../b"):
        err = refused(plan(step("a", knowledge=[bad])))
        assert err.field == "steps[a].knowledge"
