"""The plan schema's extensions: kinds, conditions, fan-out, loops, goals instead of code."""

from __future__ import annotations

import pytest

from onebox.agent.plan import parse_plan
from onebox.errors import PlanError


def refused(*steps: dict) -> PlanError:
    with pytest.raises(PlanError) as info:
        parse_plan({"steps": list(steps)})
    return info.value


def test_full_featured_plan_is_accepted() -> None:
    plan = parse_plan({"max_parallel": 2, "steps": [
        {"id": "ls", "tool": "python", "code": "print(1)"},
        {"id": "each", "tool": "python", "goal": "count words of the file",
         "foreach": "ls.result", "depends_on": ["ls"], "limits": {"timeout_s": 5}},
        {"id": "poll", "tool": "bash", "code": "echo", "until": "poll.result.done",
         "max_iterations": 3},
        {"id": "web", "kind": "http", "input": {"url": "https://example.com/x"},
         "allow_domains": ["example.com"], "when": "len(each.result) > 0",
         "depends_on": ["each"]},
        {"id": "end", "kind": "final", "input": {"answer": "{{ web.result }}"},
         "depends_on": ["web"]},
    ]})
    assert plan.step("each").goal and plan.step("each").code is None
    assert plan.step("web").kind == "http"


def test_code_step_needs_tool_and_code_or_goal() -> None:
    err = refused({"id": "a", "tool": "python"})
    assert err.field == "steps[a].code" and "goal" in err.message
    assert refused({"id": "a", "code": "x"}).field == "steps[a].tool"


def test_condition_may_only_name_dependencies() -> None:
    err = refused({"id": "a", "tool": "python", "code": "1"},
                  {"id": "b", "tool": "python", "code": "1", "when": "a.ok"})
    assert err.field == "steps[b].when" and "depends_on" in err.message


def test_bad_expressions_are_refused_at_validation() -> None:
    err = refused({"id": "a", "tool": "python", "code": "1", "when": "__import__('os')"})
    assert err.field == "steps[a].when"
    err = refused({"id": "a", "tool": "python", "code": "1", "until": "iteration >"})
    assert err.field == "steps[a].until"


def test_kind_inputs_and_http_domains() -> None:
    assert refused({"id": "q", "kind": "knowledge_search"}).field == "steps[q].input.query"
    err = refused({"id": "h", "kind": "http", "input": {"url": "https://evil.example/"}})
    assert err.field == "steps[h].allow_domains" and "evil.example" in err.message
    assert refused({"id": "h", "kind": "http", "input": {"url": "ftp://x/"},
                    "allow_domains": ["x"]}).field == "steps[h].input.url"


def test_loop_rules() -> None:
    err = refused({"id": "a", "tool": "python", "code": "1", "foreach": "[1]", "until": "True"})
    assert err.field == "steps[a].until"
    err = refused({"id": "a", "tool": "python", "code": "1", "max_iterations": 3})
    assert err.field == "steps[a].max_iterations"
    err = refused({"id": "a", "tool": "python", "code": "1", "when": "item > 1"})
    assert "not bound here" in err.message


def test_the_documented_example_plan_is_valid() -> None:
    import re
    from pathlib import Path

    import yaml

    doc = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()
    example = re.search(r"### Example\n\n```yaml\n(.*?)```", doc, re.DOTALL)
    assert example is not None
    plan = parse_plan(yaml.safe_load(example.group(1)))
    assert plan.step("per_file").foreach == "files.result"
    assert plan.step("answer").kind == "final"
